//! Placeholder: filled by the issue that builds this layer.
#![no_main]

libfuzzer_sys::fuzz_target!(|_data: &[u8]| {});
