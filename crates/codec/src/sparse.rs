//! The *sparse* image ([`CodecId::Sparse`](crate::CodecId::Sparse)): a page
//! body stored as it is, without its longest run of zero bytes.
//!
//! A B+tree page keeps its free space zeroed in one piece between the
//! record heap and the slot directory, so a page whose records fill less
//! than its block fits the block with no compression at all, and a page of
//! data that does not compress (random bytes, already compressed values)
//! costs a copy instead of a compressor's pass. Compressing codecs try this
//! first ([`BlockCodec::compress`](crate::BlockCodec::compress)).
//!
//! Image: `hole offset (u32) | hole length (u32) | body[..offset] |
//! body[offset + length..]`, offsets relative to the body (the page after
//! its reserved header bytes).

/// Bytes before the stored parts: the hole's offset and length.
pub(crate) const SPARSE_HEADER_BYTES: usize = 8;

/// The offset and length of the longest run of zero bytes in `body`.
///
/// Looks at whole 8-byte words first (a page's free space is long and
/// word-aligned at the start of the body), then widens the longest run of
/// zero words by the zero bytes on either side.
pub(crate) fn longest_zero_run(body: &[u8]) -> (usize, usize) {
    const WORD: usize = 8;
    let words = body.len() / WORD;
    let word = |i: usize| {
        let bytes: [u8; WORD] = body[i * WORD..(i + 1) * WORD]
            .try_into()
            .expect("a slice of one word");
        u64::from_ne_bytes(bytes)
    };
    let (mut best_start, mut best_words) = (0, 0);
    let mut i = 0;
    while i < words {
        if word(i) != 0 {
            i += 1;
            continue;
        }
        let start = i;
        while i < words && word(i) == 0 {
            i += 1;
        }
        if i - start > best_words {
            (best_start, best_words) = (start, i - start);
        }
    }
    let (mut start, mut end) = (best_start * WORD, (best_start + best_words) * WORD);
    if best_words == 0 {
        return (0, 0);
    }
    while start > 0 && body[start - 1] == 0 {
        start -= 1;
    }
    while end < body.len() && body[end] == 0 {
        end += 1;
    }
    (start, end - start)
}

/// The length of `body`'s sparse image and the zero run it leaves out.
pub(crate) fn sparse_len(body: &[u8]) -> (usize, (usize, usize)) {
    let hole = longest_zero_run(body);
    (SPARSE_HEADER_BYTES + body.len() - hole.1, hole)
}

/// Writes the sparse image of `body` without the run `hole` into `out`
/// (at least as long as the image) and returns its length.
pub(crate) fn store(body: &[u8], hole: (usize, usize), out: &mut [u8]) -> usize {
    let (offset, len) = hole;
    let suffix = &body[offset + len..];
    let image_len = SPARSE_HEADER_BYTES + offset + suffix.len();
    out[..4].copy_from_slice(
        &u32::try_from(offset)
            .expect("page offsets are 16-bit")
            .to_le_bytes(),
    );
    out[4..8].copy_from_slice(
        &u32::try_from(len)
            .expect("page offsets are 16-bit")
            .to_le_bytes(),
    );
    out[SPARSE_HEADER_BYTES..SPARSE_HEADER_BYTES + offset].copy_from_slice(&body[..offset]);
    out[SPARSE_HEADER_BYTES + offset..image_len].copy_from_slice(suffix);
    image_len
}

/// Rebuilds the body from a sparse `image` into `out` (exactly one body).
/// An image whose hole or lengths do not add up to the body is an error
/// (the reason), never a panic.
pub(crate) fn restore(image: &[u8], out: &mut [u8]) -> Result<(), String> {
    let Some((head, parts)) = image.split_first_chunk::<SPARSE_HEADER_BYTES>() else {
        return Err(format!("sparse image of {} bytes has no hole", image.len()));
    };
    let field = |at: usize| {
        let bytes: [u8; 4] = head[at..at + 4].try_into().expect("a 4-byte field");
        u32::from_le_bytes(bytes) as usize
    };
    let (offset, len) = (field(0), field(4));
    let body_len = out.len();
    let fits = offset
        .checked_add(len)
        .is_some_and(|hole_end| hole_end <= body_len && parts.len() == body_len - len);
    if !fits {
        return Err(format!(
            "sparse image: hole of {len} bytes at {offset} and {} stored bytes do not make a body of {body_len}",
            parts.len()
        ));
    }
    out[..offset].copy_from_slice(&parts[..offset]);
    out[offset..offset + len].fill(0);
    out[offset + len..].copy_from_slice(&parts[offset..]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The run the word scan finds is the longest of all byte runs, and
    /// the image restores the body exactly.
    #[test]
    fn longest_run_and_round_trip() {
        let mut seed = 17u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for case in 0..2_000 {
            let len = 8 * (1 + (next() % 256) as usize);
            let mut body: Vec<u8> = (0..len)
                .map(|_| if next() % 3 == 0 { 0 } else { next() as u8 })
                .collect();
            // Most cases get a long gap, as a page's free space.
            if case % 4 != 0 {
                let start = (next() as usize) % len;
                let end = start + (next() as usize) % (len - start + 1);
                body[start..end].fill(0);
            }
            let (offset, run) = longest_zero_run(&body);
            let mut longest_byte_run = 0;
            let mut current = 0;
            for &b in &body {
                current = if b == 0 { current + 1 } else { 0 };
                longest_byte_run = longest_byte_run.max(current);
            }
            assert!(body[offset..offset + run].iter().all(|&b| b == 0));
            // Word alignment may cost a run shorter than 16 bytes its
            // place; a long run is always found whole.
            if longest_byte_run >= 16 {
                assert_eq!(run, longest_byte_run, "case {case}");
            }
            let mut image = vec![0; SPARSE_HEADER_BYTES + len];
            let image_len = store(&body, (offset, run), &mut image);
            assert_eq!(image_len, SPARSE_HEADER_BYTES + len - run);
            let mut out = vec![0xAA; len];
            restore(&image[..image_len], &mut out).unwrap();
            assert_eq!(out, body, "case {case}");
        }
    }

    #[test]
    fn bad_images_are_errors() {
        let body = [1u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let mut image = vec![0; 32];
        let len = store(&body, longest_zero_run(&body), &mut image);
        let image = &image[..len];
        let mut out = [0u8; 16];
        restore(image, &mut out).unwrap();
        assert_eq!(out, body);
        assert!(restore(&image[..7], &mut out).is_err());
        assert!(restore(&image[..len - 1], &mut out).is_err());
        let mut wide = image.to_vec();
        wide[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(restore(&wide, &mut out).is_err());
        let mut late = image.to_vec();
        late[..4].copy_from_slice(&20u32.to_le_bytes());
        assert!(restore(&late, &mut out).is_err());
        let mut short_body = [0u8; 8];
        assert!(restore(image, &mut short_body).is_err());
    }
}
