//! The compression policy: which algorithm, at which level, with which
//! dictionary.
//!
//! Adding a codec (lz4, say) is local: a variant here and in [`CodecId`], and
//! one arm in each `match` of `engine.rs`. The block format does not change:
//! the codec id byte already names the algorithm of each block.

use std::sync::Arc;

use crate::error::{CodecError, Result};

/// zlib's lowest level accepted (1: fastest).
pub const ZLIB_LEVEL_MIN: u32 = 1;
/// zlib's highest level (9: smallest output).
pub const ZLIB_LEVEL_MAX: u32 = 9;
/// zlib's default level, as in zlib itself and InnoDB's `innodb_compression_level`.
pub const ZLIB_LEVEL_DEFAULT: u32 = 6;
/// zstd's lowest level accepted (negative "fast" levels are not offered).
pub const ZSTD_LEVEL_MIN: i32 = 1;
/// zstd's highest non-"ultra" level; 20+ need far more memory per context.
pub const ZSTD_LEVEL_MAX: i32 = 19;
/// zstd's own default level.
pub const ZSTD_LEVEL_DEFAULT: i32 = 3;

/// How page images are compressed: a small policy value, cheap to clone.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Codec {
    /// Pages are stored as they are, in page-sized blocks
    /// ([`BlockSize::Uncompressed`](barracuda_base::BlockSize::Uncompressed)).
    None,
    /// zlib (deflate with the zlib wrapper) through flate2's zlib-rs backend.
    Zlib {
        /// 1..=9, default [`ZLIB_LEVEL_DEFAULT`].
        level: u32,
    },
    /// Zstandard, optionally with a trained dictionary.
    Zstd {
        /// 1..=19, default [`ZSTD_LEVEL_DEFAULT`].
        level: i32,
        /// A dictionary (raw content or trained by `zstd --train`); blocks
        /// record its fingerprint and refuse to decode with another one.
        dictionary: Option<Arc<[u8]>>,
    },
}

impl Codec {
    /// zlib at the default level 6.
    #[must_use]
    pub fn zlib_default() -> Codec {
        Codec::Zlib {
            level: ZLIB_LEVEL_DEFAULT,
        }
    }

    /// zstd at the default level 3, without a dictionary.
    #[must_use]
    pub fn zstd_default() -> Codec {
        Codec::Zstd {
            level: ZSTD_LEVEL_DEFAULT,
            dictionary: None,
        }
    }

    /// Checks the level against the codec's range.
    pub fn validate(&self) -> Result<()> {
        match self {
            Codec::None => Ok(()),
            Codec::Zlib { level } => check_level(
                "zlib",
                i64::from(*level),
                ZLIB_LEVEL_MIN.into(),
                ZLIB_LEVEL_MAX.into(),
            ),
            Codec::Zstd { level, dictionary } => {
                check_level(
                    "zstd",
                    i64::from(*level),
                    ZSTD_LEVEL_MIN.into(),
                    ZSTD_LEVEL_MAX.into(),
                )?;
                match dictionary {
                    Some(d) if d.is_empty() => Err(CodecError::InvalidConfig {
                        codec: "zstd",
                        reason: "the dictionary is empty (use None)".into(),
                    }),
                    _ => Ok(()),
                }
            }
        }
    }

    /// The id recorded in every block this codec writes.
    #[must_use]
    pub fn id(&self) -> CodecId {
        match self {
            Codec::None => CodecId::None,
            Codec::Zlib { .. } => CodecId::Zlib,
            Codec::Zstd { .. } => CodecId::Zstd,
        }
    }

    /// The level as a number (0 for `None`), for reports.
    #[must_use]
    pub fn level(&self) -> i32 {
        match self {
            Codec::None => 0,
            // Validated levels are at most 9.
            Codec::Zlib { level } => i32::try_from(*level).unwrap_or(i32::MAX),
            Codec::Zstd { level, .. } => *level,
        }
    }

    /// The dictionary fingerprint recorded in blocks (0 = no dictionary).
    #[must_use]
    pub fn dictionary_id(&self) -> u32 {
        match self {
            Codec::Zstd {
                dictionary: Some(d),
                ..
            } => dictionary_fingerprint(d),
            _ => 0,
        }
    }
}

/// The fingerprint of a dictionary: its CRC32C, with 0 (reserved for "no
/// dictionary") mapped to 1.
#[must_use]
pub fn dictionary_fingerprint(dictionary: &[u8]) -> u32 {
    crc32c::crc32c(dictionary).max(1)
}

fn check_level(codec: &'static str, level: i64, min: i64, max: i64) -> Result<()> {
    if (min..=max).contains(&level) {
        return Ok(());
    }
    let clamp = |v: i64| i32::try_from(v).unwrap_or(if v < 0 { i32::MIN } else { i32::MAX });
    Err(CodecError::InvalidLevel {
        codec,
        level: clamp(level),
        min: clamp(min),
        max: clamp(max),
    })
}

/// The codec byte of a block header.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[repr(u8)]
pub enum CodecId {
    /// Stored as it is (uncompressed geometry only).
    None = 0,
    /// zlib stream.
    Zlib = 1,
    /// zstd frame.
    Zstd = 2,
    /// The page body stored without its longest run of zero bytes (its
    /// free space): what a compressing codec writes instead of compressing
    /// when this fits the block, whatever its policy.
    Sparse = 3,
}

impl CodecId {
    /// The codec id of a header byte, or `None` if unknown.
    #[must_use]
    pub fn from_byte(byte: u8) -> Option<CodecId> {
        match byte {
            0 => Some(CodecId::None),
            1 => Some(CodecId::Zlib),
            2 => Some(CodecId::Zstd),
            3 => Some(CodecId::Sparse),
            _ => None,
        }
    }

    /// The codec's name, for messages and reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            CodecId::None => "none",
            CodecId::Zlib => "zlib",
            CodecId::Zstd => "zstd",
            CodecId::Sparse => "sparse",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_validated() {
        assert!(Codec::zlib_default().validate().is_ok());
        assert!(Codec::zstd_default().validate().is_ok());
        for level in [0, 10, u32::MAX] {
            let err = Codec::Zlib { level }.validate().unwrap_err();
            assert!(
                matches!(err, CodecError::InvalidLevel { codec: "zlib", .. }),
                "{err}"
            );
        }
        for level in [0, -1, 20, i32::MIN] {
            let err = Codec::Zstd {
                level,
                dictionary: None,
            }
            .validate()
            .unwrap_err();
            assert!(
                matches!(err, CodecError::InvalidLevel { codec: "zstd", .. }),
                "{err}"
            );
        }
    }

    #[test]
    fn empty_dictionary_is_refused() {
        let codec = Codec::Zstd {
            level: 3,
            dictionary: Some(Arc::from(&[][..])),
        };
        assert!(matches!(
            codec.validate(),
            Err(CodecError::InvalidConfig { .. })
        ));
    }

    #[test]
    fn codec_ids_round_trip() {
        for id in [CodecId::None, CodecId::Zlib, CodecId::Zstd, CodecId::Sparse] {
            assert_eq!(CodecId::from_byte(id as u8), Some(id));
        }
        assert_eq!(CodecId::from_byte(4), None);
    }
}
