//! The values' compression: zstd at its fastest level, kept only when it
//! saves enough.

/// A value is kept compressed only if that saves at least an eighth.
const COMPRESSED_SHARE_MAX_EIGHTHS: usize = 7;

/// zstd's fastest level: a fill happens on a miss, next to a disk read.
const ZSTD_LEVEL: i32 = 1;

thread_local! {
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// `value` compressed, if that saves an eighth; `None` to keep it as is.
pub(super) fn compress(value: &[u8]) -> Option<Vec<u8>> {
    if value.len() < 64 {
        return None;
    }
    COMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = Some(zstd::bulk::Compressor::new(ZSTD_LEVEL).ok()?);
        }
        let compressed = cell.as_mut()?.compress(value).ok()?;
        (compressed.len() * 8 <= value.len() * COMPRESSED_SHARE_MAX_EIGHTHS).then_some(compressed)
    })
}

/// Decompresses `stored` (of a value of `value_len` bytes) into `out`.
pub(super) fn decompress(stored: &[u8], value_len: usize, out: &mut Vec<u8>) -> bool {
    out.clear();
    out.reserve(value_len);
    DECOMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            match zstd::bulk::Decompressor::new() {
                Ok(decompressor) => *cell = Some(decompressor),
                Err(_) => return false,
            }
        }
        let Some(decompressor) = cell.as_mut() else {
            return false;
        };
        matches!(decompressor.decompress_to_buffer(stored, out), Ok(n) if n == value_len)
    })
}
