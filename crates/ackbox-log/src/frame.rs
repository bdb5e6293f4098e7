//! How one record sits in a segment: `[payload length: u32 LE][CRC-32 of the
//! payload: u32 LE][payload]`.
//!
//! The checksum is what tells a torn or never-flushed write from a record:
//! after a crash the last segment may end in a frame whose length or bytes
//! are garbage, and [`next_frame`] says so instead of handing it on.
//!
//! Records appended together are one unit (a topic's fan-out, a send and
//! its archive copy, a batch): every frame but the group's last has the
//! length word's top bit set, "more of this group follows", and its
//! checksum inverted, so a flipped flag never reads as a frame. A power cut
//! can tear a write between two frames; recovery keeps a group only once
//! its last frame is there, so it keeps all of a group's records or none.

/// Bytes before every payload: its length and its checksum.
pub const FRAME_HEADER_BYTES: usize = 8;

/// The largest payload a frame may carry. A length above it is not a record
/// (SQS messages are at most 1 MiB; this leaves room for their attributes):
/// reading it as one would make a torn length allocate gigabytes.
pub const MAX_PAYLOAD_BYTES: usize = 4 << 20;

/// The length word's top bit: more frames of the same group follow. Lengths
/// never reach it ([`MAX_PAYLOAD_BYTES`] is far below), so frames written
/// before groups existed read as groups of one.
const CONTINUES: u32 = 1 << 31;

/// What can be written as a frame's payload: encoded straight into the
/// frame's buffer, so a record costs no buffer of its own and no copy.
pub trait Payload {
    /// Appends the payload's bytes to `out`.
    fn encode_into(&self, out: &mut Vec<u8>);
}

impl Payload for [u8] {
    fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
}

impl<T: Payload + ?Sized> Payload for &T {
    fn encode_into(&self, out: &mut Vec<u8>) {
        (**self).encode_into(out);
    }
}

/// Appends `payload` to `out` as one frame; `continues` when more frames of
/// its group follow it.
///
/// # Panics
/// When `payload` is longer than [`MAX_PAYLOAD_BYTES`]: callers bound what
/// they log, so a longer one is a bug, not input.
pub fn encode_frame(out: &mut Vec<u8>, payload: &(impl Payload + ?Sized), continues: bool) {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
    payload.encode_into(out);
    let (header, encoded) = out[start..].split_at_mut(FRAME_HEADER_BYTES);
    assert!(
        encoded.len() <= MAX_PAYLOAD_BYTES,
        "a log payload of {} bytes exceeds the {MAX_PAYLOAD_BYTES}-byte frame limit",
        encoded.len()
    );
    let length = u32::try_from(encoded.len()).unwrap_or(u32::MAX);
    let length_word = if continues {
        length | CONTINUES
    } else {
        length
    };
    header[..4].copy_from_slice(&length_word.to_le_bytes());
    header[4..].copy_from_slice(&checksum(encoded, continues).to_le_bytes());
}

/// The checksum a frame's header records: a continuing frame's is inverted,
/// so that a flag flipped by damage makes the frame fail its check.
fn checksum(payload: &[u8], continues: bool) -> u32 {
    let crc = crc32fast::hash(payload);
    if continues { !crc } else { crc }
}

/// What [`next_frame`] found at an offset.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameRead<'a> {
    /// A whole frame whose checksum matches; the next one starts `len` bytes on.
    Frame {
        /// The record's bytes.
        payload: &'a [u8],
        /// Header and payload together.
        len: usize,
        /// More frames of its group follow: it counts only once they are
        /// all there.
        continues: bool,
    },
    /// Nothing left: the bytes ended exactly at a frame boundary.
    End,
    /// Not a frame: a crash's torn tail, or damage.
    Invalid(InvalidFrame),
}

/// Why the bytes at an offset are not a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidFrame {
    /// Fewer bytes than a frame header.
    #[error("{available} bytes where a frame header needs {FRAME_HEADER_BYTES}")]
    ShortHeader {
        /// Bytes left.
        available: usize,
    },
    /// A zero length: the file was extended but its bytes never written.
    #[error("a zero-length frame")]
    Empty,
    /// A length above [`MAX_PAYLOAD_BYTES`].
    #[error("a frame length of {length} bytes exceeds the {MAX_PAYLOAD_BYTES}-byte limit")]
    TooLong {
        /// The length the header claims.
        length: usize,
    },
    /// The header claims more bytes than are left.
    #[error("a frame of {length} bytes where only {available} are left")]
    ShortPayload {
        /// The length the header claims.
        length: usize,
        /// Bytes left after the header.
        available: usize,
    },
    /// A group's last frame is missing: the frames from here on were written
    /// together and a crash tore the write before it was synced.
    #[error("{frames} frame(s) of a group whose last frame is missing")]
    UnfinishedGroup {
        /// The group's frames that are there.
        frames: usize,
    },
    /// The payload's checksum is not the one in the header.
    #[error("a frame whose checksum {actual:#010x} is not the recorded {recorded:#010x}")]
    Checksum {
        /// The checksum in the header.
        recorded: u32,
        /// The checksum of the bytes found.
        actual: u32,
    },
}

/// Reads the frame at the start of `bytes`.
pub fn next_frame(bytes: &[u8]) -> FrameRead<'_> {
    if bytes.is_empty() {
        return FrameRead::End;
    }
    let Some((header, rest)) = bytes.split_first_chunk::<FRAME_HEADER_BYTES>() else {
        return FrameRead::Invalid(InvalidFrame::ShortHeader {
            available: bytes.len(),
        });
    };
    let (length_word, recorded) = header.split_at(4);
    let length_word = u32::from_le_bytes(length_word.try_into().unwrap_or_default());
    let continues = length_word & CONTINUES != 0;
    let length = (length_word & !CONTINUES) as usize;
    let recorded = u32::from_le_bytes(recorded.try_into().unwrap_or_default());
    if length == 0 {
        return FrameRead::Invalid(InvalidFrame::Empty);
    }
    if length > MAX_PAYLOAD_BYTES {
        return FrameRead::Invalid(InvalidFrame::TooLong { length });
    }
    let Some(payload) = rest.get(..length) else {
        return FrameRead::Invalid(InvalidFrame::ShortPayload {
            length,
            available: rest.len(),
        });
    };
    let actual = checksum(payload, continues);
    if actual != recorded {
        return FrameRead::Invalid(InvalidFrame::Checksum { recorded, actual });
    }
    FrameRead::Frame {
        payload,
        len: FRAME_HEADER_BYTES + length,
        continues,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn framed(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for payload in payloads {
            encode_frame(&mut out, payload, false);
        }
        out
    }

    #[test]
    fn frames_read_back_in_order_and_end_at_the_boundary() {
        let bytes = framed(&[b"one", b"two!"]);
        let FrameRead::Frame { payload, len, .. } = next_frame(&bytes) else {
            panic!("the first frame did not read back");
        };
        assert_eq!((payload, len), (&b"one"[..], 11));
        let FrameRead::Frame { payload, len, .. } = next_frame(&bytes[11..]) else {
            panic!("the second frame did not read back");
        };
        assert_eq!((payload, len), (&b"two!"[..], 12));
        assert_eq!(next_frame(&bytes[23..]), FrameRead::End);
    }

    #[test]
    fn a_group_marks_every_frame_but_its_last_as_continuing() {
        let mut bytes = Vec::new();
        encode_frame(&mut bytes, &b"first"[..], true);
        encode_frame(&mut bytes, &b"last"[..], false);
        assert_eq!(
            next_frame(&bytes),
            FrameRead::Frame {
                payload: b"first",
                len: 13,
                continues: true
            }
        );
        assert_eq!(
            next_frame(&bytes[13..]),
            FrameRead::Frame {
                payload: b"last",
                len: 12,
                continues: false
            }
        );
    }

    #[test]
    fn a_flag_flipped_either_way_fails_the_checksum() {
        for continues in [false, true] {
            let mut bytes = Vec::new();
            encode_frame(&mut bytes, &b"payload"[..], continues);
            bytes[3] ^= 0x80;
            assert!(
                matches!(
                    next_frame(&bytes),
                    FrameRead::Invalid(InvalidFrame::Checksum { .. })
                ),
                "a frame written with continues={continues} read back with the flag flipped"
            );
        }
    }

    #[test]
    fn zeros_where_a_frame_should_be_are_not_a_frame() {
        assert_eq!(
            next_frame(&[0; 16]),
            FrameRead::Invalid(InvalidFrame::Empty)
        );
    }

    #[test]
    fn a_length_beyond_the_limit_is_refused_before_anything_is_read() {
        let mut bytes = (u32::MAX).to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0; 12]);
        assert_eq!(
            next_frame(&bytes),
            FrameRead::Invalid(InvalidFrame::TooLong {
                length: (u32::MAX >> 1) as usize
            })
        );
    }

    proptest! {
        /// Cutting a frame anywhere short of its end never yields a frame.
        #[test]
        fn a_truncated_frame_is_never_read_as_one(payload in proptest::collection::vec(any::<u8>(), 1..300), cut in 0usize..1000) {
            let bytes = framed(&[&payload]);
            let cut = cut % bytes.len();
            let read = next_frame(&bytes[..cut]);
            prop_assert!(matches!(read, FrameRead::Invalid(_) | FrameRead::End), "{read:?}");
            prop_assert_eq!(cut == 0, read == FrameRead::End);
        }

        /// Flipping any bit of a frame makes it invalid (CRC-32 catches every
        /// single-bit error; a flipped length is short, long or mismatched).
        #[test]
        fn a_flipped_bit_is_caught(payload in proptest::collection::vec(any::<u8>(), 1..300), bit in 0usize..10_000, continues: bool) {
            let mut bytes = Vec::new();
            encode_frame(&mut bytes, &payload[..], continues);
            let bit = bit % (bytes.len() * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(matches!(next_frame(&bytes), FrameRead::Invalid(_)));
        }
    }
}
