package commerce

// emptyDLQBytes is the size of an empty dead-letter state in a snapshot:
// fault, message, next, five counters and the entry count, one byte each.
const emptyDLQBytes = 9
