// Package bench holds Surge's load generators, one per `surge bench`
// command, and the rig they share.
//
// Every command's options embed Options (target, data dir, JSON path,
// binaries, outputs). A Rig owns what a run starts: `surge serve`
// (startServe, or target, which stands for --target when given), the
// do-nothing server (startNull), their logs and data in one temp dir, and
// kills them all on every exit path. A workload's bench is a scenario: it
// sets up, loads (printing each step as it ends and adding its problems to
// the report's Verdict) and judges; runScenario runs those steps and ends
// every bench alike: the JSON, then FAILED with the problems and the kept
// logs, or the OK line. The overload and restart benches use the rig
// without the scenario's ending: they have no verdict of their own.
//
// The shared measuring pieces: schedule (an open loop on a fixed clock),
// cpuMeter (the server's and the generator's CPU over a window, from
// /proc through procfs or from /metrics), scrape (a server's /metrics
// through expfmt), progress (the live line on stderr), and the report
// writers columns (runs side by side) and writeGoals.
package bench
