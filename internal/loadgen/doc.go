// Package loadgen sends a workload to an OpenAI-compatible endpoint and
// measures it: Driver replays requests at their arrival offsets (or closed
// loop) over streaming /v1/completions, Results.Summary reduces the
// per-request records to percentiles and cache ratios, and Table, Report
// and PlotTTFTCDF render one or more runs for people, machines and eyes.
//
// Only Driver does I/O and runs goroutines; the scheduling plan, stream
// parsing, statistics and rendering are pure, and time comes from a Clock
// so that tests control it.
package loadgen
