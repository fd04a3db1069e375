package ids

// FNV-1a's 64-bit parameters.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// Hash is 64-bit FNV-1a over s: the key hash that places every key in a
// partition (engine.PartitionOf). It must never change.
func Hash(s string) uint64 { return HashMore(fnvOffset, s) }

// HashMore continues a hash over s, so a composite key can be hashed
// without building it as a string: HashMore(Hash(a), b) == Hash(a+b).
func HashMore(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// HashBytes is Hash over b, without making b a string.
func HashBytes(b []byte) uint64 {
	h := uint64(fnvOffset)
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}
