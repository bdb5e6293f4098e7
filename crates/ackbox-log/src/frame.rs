//! How one record sits in a segment: `[payload length: u32 LE][CRC-32 of the
//! payload: u32 LE][payload]`.
//!
//! The checksum is what tells a torn or never-flushed write from a record:
//! after a crash the last segment may end in a frame whose length or bytes
//! are garbage, and [`next_frame`] says so instead of handing it on.

/// Bytes before every payload: its length and its checksum.
pub const FRAME_HEADER_BYTES: usize = 8;

/// The largest payload a frame may carry. A length above it is not a record
/// (SQS messages are at most 1 MiB; this leaves room for their attributes):
/// reading it as one would make a torn length allocate gigabytes.
pub const MAX_PAYLOAD_BYTES: usize = 4 << 20;

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

/// Appends `payload` to `out` as one frame.
///
/// # Panics
/// When `payload` is longer than [`MAX_PAYLOAD_BYTES`]: callers bound what
/// they log, so a longer one is a bug, not input.
pub fn encode_frame(out: &mut Vec<u8>, payload: &(impl Payload + ?Sized)) {
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
    header[..4].copy_from_slice(&length.to_le_bytes());
    header[4..].copy_from_slice(&crc32fast::hash(encoded).to_le_bytes());
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
    let (length, recorded) = header.split_at(4);
    let length = u32::from_le_bytes(length.try_into().unwrap_or_default()) as usize;
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
    let actual = crc32fast::hash(payload);
    if actual != recorded {
        return FrameRead::Invalid(InvalidFrame::Checksum { recorded, actual });
    }
    FrameRead::Frame {
        payload,
        len: FRAME_HEADER_BYTES + length,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn framed(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for payload in payloads {
            encode_frame(&mut out, payload);
        }
        out
    }

    #[test]
    fn frames_read_back_in_order_and_end_at_the_boundary() {
        let bytes = framed(&[b"one", b"two!"]);
        let FrameRead::Frame { payload, len } = next_frame(&bytes) else {
            panic!("the first frame did not read back");
        };
        assert_eq!((payload, len), (&b"one"[..], 11));
        let FrameRead::Frame { payload, len } = next_frame(&bytes[11..]) else {
            panic!("the second frame did not read back");
        };
        assert_eq!((payload, len), (&b"two!"[..], 12));
        assert_eq!(next_frame(&bytes[23..]), FrameRead::End);
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
                length: u32::MAX as usize
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
        fn a_flipped_bit_is_caught(payload in proptest::collection::vec(any::<u8>(), 1..300), bit in 0usize..10_000) {
            let mut bytes = framed(&[&payload]);
            let bit = bit % (bytes.len() * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(matches!(next_frame(&bytes), FrameRead::Invalid(_)));
        }
    }
}
