// Package enginetest is the kit for testing a workload: the same tools
// serve the four built in and one you add. A workload is tested at four
// levels, from its Machine alone to a cluster, and each has its tool here.
//
// # One machine: engine.Effects
//
// A Machine's whole contact with the engine is Apply(in, fx). A test makes
// the Effects itself and reads what the command asked for:
//
//	m := w.NewMachine(0)
//	fx := new(engine.Effects)
//	m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: now, Cmd: cmd}, fx)
//	res := fx.Replied().(*Result)
//	// fx.Sends(), fx.Timers(), fx.Notes(), fx.IsUnchanged(), fx.Unlogged()
//	fx.Reset() // before the next Apply
//
// # Many partitions, no engine: Harness
//
// A Harness runs a workload's machines in N partitions the way the engine
// does, deterministically and fast enough for thousands of random steps:
//
//   - a client command goes to the partition that owns its key
//     (engine.PartitionOfHash), decoded from its own bytes as replay will
//     see it;
//   - a message waits in a queue per (source, target) pair, delivered in
//     order within the pair and in a random order across pairs (Deliver,
//     Drain);
//   - a timer fires once Advance moves the clock past it, earliest first;
//   - every input is logged by the engine's rule (a client command that
//     declared Unchanged and did nothing else is not), so CheckReplay can
//     rebuild each partition from its log and from its snapshot (and a
//     fork of it) and require the same bytes.
//
// A property test drives random commands through Client, lets time pass
// with Advance, checks its own model of the workload after each step (the
// model sees every reply and note through OnApply) and calls CheckReplay
// now and then; the run then goes on with the rebuilt machines, so a field
// a snapshot forgets shows up as a wrong answer later. Randomness comes
// from Rng, seeded by the test, so a failing seed fails again:
//
//	h := enginetest.NewHarness[*Machine, *Result](t, &Workload{}, 3, seed)
//	h.OnApply = model.observe
//	for i := range steps {
//		h.Client(key, randomCommand(h.Rng))
//		h.Advance(h.Rng.Int64N(maxStep))
//		model.check(h)
//		if i%300 == 299 {
//			h.CheckReplay()
//		}
//	}
//
// What the Harness leaves out is the engine's own business, tested in
// package engine: batching and durability, crashes (its simulation test),
// admission, snapshots taken while commands go on.
//
// # The real engine: OpenEngine
//
// OpenEngine opens an engine on the write-ahead log in a directory; close
// it and open the directory again to test a restart. APIEngine is the
// engine of API tests: embedded, or behind a forwarding node (ForwardEnv).
// engine.Do[R], engine.Query[R] and engine.QueryAll[R] return answers as
// the workload's own types, as its API code does.
//
// # A cluster in one process: Store, Net, Forwarding
//
// Store and Net run engines in cluster mode inside one process: partition
// logs and snapshots in memory with the fencing rule of the real (Kafka)
// log, and a transport that calls the owner's engine directly. Forwarding
// gives a node that serves no partition, so a workload's API tests can run
// with every query, reply and note crossing the wire encoding (set
// ForwardEnv).
//
// RetainedHeap measures the memory a structure keeps, for tests that bound
// a workload's footprint.
package enginetest
