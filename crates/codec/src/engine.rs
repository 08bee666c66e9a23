//! The compression libraries behind [`Codec`]: one reusable context per
//! algorithm and direction, created once per [`BlockCodec`](crate::BlockCodec)
//! so that nothing is allocated per page.
//!
//! Adding a codec means one field here and one arm in `compress` and
//! `decompress`.

use barracuda_base::PageId;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use crate::codec::{Codec, CodecId};
use crate::error::{CodecError, Result};
use crate::sparse;

/// Compression and decompression contexts.
pub(crate) struct Engines {
    /// Present when the policy is zlib.
    zlib_compress: Option<Compress>,
    /// Always present: any block may be zlib, whatever the policy.
    zlib_decompress: Decompress,
    /// Present when the policy is zstd (holds the dictionary, if any).
    zstd_compress: Option<zstd::bulk::Compressor<'static>>,
    /// Always present; holds the policy's dictionary, if any.
    zstd_decompress: zstd::bulk::Decompressor<'static>,
}

impl Engines {
    /// Contexts for `codec` (already validated).
    pub(crate) fn new(codec: &Codec) -> Result<Engines> {
        let zstd_error = |e: std::io::Error| CodecError::InvalidConfig {
            codec: "zstd",
            reason: e.to_string(),
        };
        let (zlib_compress, zstd_compress, dictionary) = match codec {
            Codec::None => (None, None, None),
            Codec::Zlib { level } => (
                Some(Compress::new(Compression::new(*level), true)),
                None,
                None,
            ),
            Codec::Zstd { level, dictionary } => {
                let dictionary: &[u8] = dictionary.as_deref().unwrap_or(&[]);
                let compressor = zstd::bulk::Compressor::with_dictionary(*level, dictionary)
                    .map_err(zstd_error)?;
                (None, Some(compressor), Some(dictionary))
            }
        };
        let zstd_decompress = zstd::bulk::Decompressor::with_dictionary(dictionary.unwrap_or(&[]))
            .map_err(zstd_error)?;
        Ok(Engines {
            zlib_compress,
            zlib_decompress: Decompress::new(true),
            zstd_compress,
            zstd_decompress,
        })
    }

    /// Compresses `input` into `out` (sized by [`compress_bound`]) and returns
    /// the compressed length.
    pub(crate) fn compress(
        &mut self,
        codec_id: CodecId,
        page_id: PageId,
        input: &[u8],
        out: &mut [u8],
    ) -> Result<usize> {
        let failed = |reason: String| CodecError::CompressFailed {
            page_id,
            codec: codec_id.name(),
            reason,
        };
        match codec_id {
            CodecId::None => {
                let dst = out
                    .get_mut(..input.len())
                    .ok_or_else(|| failed("output buffer too small".into()))?;
                dst.copy_from_slice(input);
                Ok(input.len())
            }
            CodecId::Zlib => {
                let c = self
                    .zlib_compress
                    .as_mut()
                    .ok_or_else(|| failed("no zlib context".into()))?;
                c.reset();
                let status = c
                    .compress(input, out, FlushCompress::Finish)
                    .map_err(|e| failed(e.to_string()))?;
                if status != Status::StreamEnd {
                    return Err(failed(format!("stream did not end ({status:?})")));
                }
                usize::try_from(c.total_out()).map_err(|e| failed(e.to_string()))
            }
            CodecId::Zstd => {
                let c = self
                    .zstd_compress
                    .as_mut()
                    .ok_or_else(|| failed("no zstd context".into()))?;
                c.compress_to_buffer(input, out)
                    .map_err(|e| failed(e.to_string()))
            }
            // Not a policy: `BlockCodec` stores a page sparse when it fits so,
            // before any engine runs.
            CodecId::Sparse => Err(failed(
                "sparse images are not compressed by an engine".into(),
            )),
        }
    }

    /// Decompresses `input` into exactly `out.len()` bytes.
    pub(crate) fn decompress(
        &mut self,
        codec_id: CodecId,
        page_id: PageId,
        input: &[u8],
        out: &mut [u8],
    ) -> Result<()> {
        let corrupted = |reason: String| CodecError::Corrupted {
            page_id,
            codec: codec_id.name(),
            reason,
        };
        match codec_id {
            CodecId::None => {
                if input.len() != out.len() {
                    return Err(corrupted(format!(
                        "stored image is {} bytes, the page body {}",
                        input.len(),
                        out.len()
                    )));
                }
                out.copy_from_slice(input);
                Ok(())
            }
            CodecId::Zlib => {
                let d = &mut self.zlib_decompress;
                d.reset(true);
                let status = d
                    .decompress(input, out, FlushDecompress::Finish)
                    .map_err(|e| corrupted(e.to_string()))?;
                let (read, written) = (d.total_in(), d.total_out());
                if status != Status::StreamEnd
                    || read != input.len() as u64
                    || written != out.len() as u64
                {
                    return Err(corrupted(format!(
                        "stream {status:?} after reading {read} of {} bytes and writing {written} of {}",
                        input.len(),
                        out.len()
                    )));
                }
                Ok(())
            }
            CodecId::Zstd => {
                let written = self
                    .zstd_decompress
                    .decompress_to_buffer(input, out)
                    .map_err(|e| corrupted(e.to_string()))?;
                if written != out.len() {
                    return Err(corrupted(format!(
                        "frame holds {written} bytes, the page body {}",
                        out.len()
                    )));
                }
                Ok(())
            }
            CodecId::Sparse => sparse::restore(input, out).map_err(corrupted),
        }
    }
}

/// The output buffer that always holds the compressed form of `input_bytes`
/// bytes, for every codec: zstd's bound, and zlib's (deflate stored blocks
/// add 5 bytes per 16 KiB plus a 6-byte wrapper) with a wide margin.
pub(crate) fn compress_bound(input_bytes: usize) -> usize {
    let zlib = input_bytes + input_bytes / 8 + 1024;
    zstd::zstd_safe::compress_bound(input_bytes).max(zlib)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `CompressFailed` cannot be reached through `BlockCodec` (its contexts
    /// always match its policy, its output buffer is sized by the bound), so the
    /// variant is checked here, where a mismatch can be forced.
    #[test]
    fn compress_failed_names_the_page() {
        let mut engines = Engines::new(&Codec::None).unwrap();
        let mut out = vec![0; compress_bound(100)];
        let err = engines
            .compress(CodecId::Zlib, PageId(5), &[1; 100], &mut out)
            .unwrap_err();
        assert!(
            matches!(
                err,
                CodecError::CompressFailed {
                    page_id: PageId(5),
                    codec: "zlib",
                    ..
                }
            ),
            "{err}"
        );
        let err = engines
            .compress(CodecId::None, PageId(6), &[1; 100], &mut out[..10])
            .unwrap_err();
        assert!(
            matches!(
                err,
                CodecError::CompressFailed {
                    page_id: PageId(6),
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn zlib_output_longer_than_the_body_is_corrupted() {
        let mut engines = Engines::new(&Codec::zlib_default()).unwrap();
        let mut compressed = vec![0; compress_bound(200)];
        let n = engines
            .compress(CodecId::Zlib, PageId(1), &[9; 200], &mut compressed)
            .unwrap();
        let mut out = [0; 100];
        let err = engines
            .decompress(CodecId::Zlib, PageId(1), &compressed[..n], &mut out)
            .unwrap_err();
        assert!(
            matches!(err, CodecError::Corrupted { codec: "zlib", .. }),
            "{err}"
        );
    }
}
