//! A whole event stream (header, then frames) through `Decoder`: it must end, with an event
//! count the bytes can hold, and never panic or allocate without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut dec) = gpushim_wire::Decoder::new(data) else { return };
    let mut n = 0usize;
    // Every frame takes at least 5 bytes (length and tag).
    while let Ok(Some(_)) = dec.next_event() {
        n += 1;
        assert!(n <= data.len() / 5);
    }
});
