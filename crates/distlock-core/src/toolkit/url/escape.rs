//! Percent-decoding of what a URL says and percent-encoding of what `Display`
//! writes back: byte-level text handling, apart from the grammar that uses it.

/// Decodes `%XX` escapes; the error says what is wrong without quoting the text.
pub(super) fn decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let byte = text
                .get(i + 1..i + 3)
                // `from_str_radix` alone would take a sign: `%+F`.
                .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "has a bad %-escape (write %XX with two hex digits)".to_owned())?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "decodes to invalid UTF-8".to_owned())
}

fn encode_with(text: &str, keep: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || "-._~".contains(c) || keep(c) {
            out.push(c);
        } else {
            let mut buf = [0; 4];
            for byte in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{byte:02X}"));
            }
        }
    }
    out
}

pub(super) fn encode(text: &str) -> String {
    encode_with(text, |c| c == ':')
}

pub(super) fn encode_path(text: &str) -> String {
    encode_with(text, |c| c == '/' || c == ':')
}
