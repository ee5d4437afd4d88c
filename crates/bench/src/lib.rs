//! toolhost's benchmarks live under `benches/`; see BENCHMARKS.md for what each measures
//! and how to rerun it.
