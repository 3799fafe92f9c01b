#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| distlock_fuzz::targets::postgres_url(data));
