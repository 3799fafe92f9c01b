#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| distlock_fuzz::cli::cli_args(data));
