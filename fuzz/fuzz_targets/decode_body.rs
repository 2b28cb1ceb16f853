//! One frame body through `decode_body`: never a panic, and whatever decodes encodes back to
//! the same bytes (the format has one encoding per event).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    if let Ok(Some(ev)) = gpushim_wire::decode_body(body) {
        let mut again = Vec::new();
        gpushim_wire::encode(&ev, &mut again);
        assert_eq!(&again[4..], body);
    }
});
