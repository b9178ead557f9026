//! Line shapes and the memory of their verdicts. A shape is computed and hashed in one pass over the
//! line, sixteen bytes at a time, and looked up in a table keyed by that hash: on a known shape (most
//! lines of a log) this is the whole cost of the scan.

use hashbrown::HashTable;

use super::Mark;

/// Shapes remembered by one [`ShapeMemory`]; past this, unknown shapes are searched without being
/// remembered (which bounds its memory). A log that filled it with fine shapes shows a new one on most
/// lines (an id on each): its lines are then read in their coarse shapes only, which skips a fine
/// shape's writing and a lookup bound to miss.
pub(super) const MAX_SHAPES: usize = 8192;
/// Longest line whose shape is remembered: long lines rarely repeat (tqdm redraws, dumps), and a
/// bound keeps the memory of one read's shapes small.
pub(super) const MAX_SHAPE_BYTES: usize = 512;

/// Which bytes a shape reads as `0`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Reading {
    /// ASCII digits.
    Digits,
    /// ASCII hex digits, either case.
    Hex,
}

impl Reading {
    /// Whether a class range holds a byte this reading replaces.
    pub(super) fn overlaps(self, start: u32, end: u32) -> bool {
        let ranges: &[(u8, u8)] = match self {
            Reading::Digits => &[(b'0', b'9')],
            Reading::Hex => &[(b'0', b'9'), (b'a', b'f'), (b'A', b'F')],
        };
        ranges
            .iter()
            .any(|&(low, high)| start <= u32::from(high) && end >= u32::from(low))
    }
}

/// Line shapes seen so far, with their verdicts. A verdict depends on the shape and the scan alone, so
/// one memory may serve several reads of a log with the same scan; it holds at most [`MAX_SHAPES`]
/// shapes of at most [`MAX_SHAPE_BYTES`] each.
#[derive(Default)]
pub struct ShapeMemory {
    pub(super) known: ShapeTable,
    /// The coarse shapes, once the read has shown many fine ones.
    pub(super) coarse_known: ShapeTable,
    /// The current line's shape.
    pub(super) scratch: ShapeBuffer,
    /// Its coarse shape.
    pub(super) coarse_scratch: ShapeBuffer,
}

/// Shapes with their hashes and marks.
#[derive(Default)]
pub(super) struct ShapeTable(HashTable<(u64, Box<[u8]>, Mark)>);

impl ShapeTable {
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The mark of `shape`, whose hash ([`ShapeBuffer::shape`]) is `hash`, if known.
    pub(super) fn get(&self, hash: u64, shape: &[u8]) -> Option<Mark> {
        self.0
            .find(hash, |(known_hash, known, _)| {
                *known_hash == hash && **known == *shape
            })
            .map(|&(_, _, mark)| mark)
    }

    /// Adds a shape's mark when the table has room for it.
    pub(super) fn remember(&mut self, hash: u64, shape: &[u8], mark: Mark) {
        if self.0.len() < MAX_SHAPES {
            self.0
                .insert_unique(hash, (hash, shape.into(), mark), |&(hash, _, _)| hash);
        }
    }
}

/// Room for the shape of a line of at most [`MAX_SHAPE_BYTES`], and for the 16 bytes its last block
/// may write past it.
pub(super) const SHAPE_BUFFER_BYTES: usize = MAX_SHAPE_BYTES + 16;

/// Where a line's shape is written to be looked up, without allocating.
pub(super) struct ShapeBuffer(Box<[u8; SHAPE_BUFFER_BYTES]>);

impl Default for ShapeBuffer {
    fn default() -> Self {
        Self(Box::new([0; SHAPE_BUFFER_BYTES]))
    }
}

impl ShapeBuffer {
    /// Writes the shape of the line `bytes[..length]` and returns its hash and the shape; None for a
    /// line longer than [`MAX_SHAPE_BYTES`]. `bytes` may go on past the line (into the rest of its read)
    /// up to the next multiple of 16 bytes, which lets every block be shaped whole.
    pub(super) fn shape(
        &mut self,
        bytes: &[u8],
        length: usize,
        reading: Reading,
    ) -> Option<(u64, &[u8])> {
        if length > MAX_SHAPE_BYTES || length > bytes.len() {
            return None;
        }
        let input = bytes.get(..length.next_multiple_of(16).min(bytes.len()))?;
        // One loop per reading, so the byte test is fixed inside each and the compiler can vectorise it.
        match reading {
            Reading::Digits => shape_blocks(input, &mut self.0, |byte| {
                if byte.is_ascii_digit() { b'0' } else { byte }
            }),
            Reading::Hex => shape_blocks(input, &mut self.0, |byte| {
                if byte.is_ascii_hexdigit() { b'0' } else { byte }
            }),
        }
        let shape = self.0.get(..length)?;
        Some((hash_shape(shape), shape))
    }
}

/// The shape of `bytes`, of any length.
pub(super) fn shape_of(bytes: &[u8], reading: Reading) -> Vec<u8> {
    bytes
        .iter()
        .map(|&byte| match reading {
            Reading::Digits if byte.is_ascii_digit() => b'0',
            Reading::Hex if byte.is_ascii_hexdigit() => b'0',
            _ => byte,
        })
        .collect()
}

/// Writes the shape of `bytes` (at most [`MAX_SHAPE_BYTES`] rounded up to 16) to the start of `out`,
/// sixteen bytes at a time: a whole block at each step is what the compiler turns into vector
/// instructions (a loop over bytes ends on a remainder done byte by byte).
fn shape_blocks(bytes: &[u8], out: &mut [u8; SHAPE_BUFFER_BYTES], shape: impl Fn(u8) -> u8) {
    let shape_block = |mut block: [u8; 16]| {
        for byte in &mut block {
            *byte = shape(*byte);
        }
        block
    };
    let (blocks, rest) = bytes.as_chunks::<16>();
    let (targets, _) = out.as_chunks_mut::<16>();
    for (target, block) in targets.iter_mut().zip(blocks) {
        *target = shape_block(*block);
    }
    // Only a line at the very end of its read has no 16 bytes after its start.
    if !rest.is_empty() {
        let mut last = [0u8; 16];
        last[..rest.len()].copy_from_slice(rest);
        if let Some(target) = targets.get_mut(blocks.len()) {
            *target = shape_block(last);
        }
    }
}

/// A multiplicative hash of a shape: each 16 bytes go through one wide multiplication, independent of
/// the others so the processor overlaps them, and a last one mixes their sum with the length. The last
/// block is the shape's last sixteen bytes (overlapping the block before), or the shape padded with
/// zero bytes when shorter. Only lookups of this process's own lines use it.
fn hash_shape(shape: &[u8]) -> u64 {
    let (blocks, rest) = shape.as_chunks::<16>();
    let mut sum = (shape.len() as u64).wrapping_mul(K2);
    for (place, block) in blocks.iter().enumerate() {
        sum = sum.wrapping_add(mix_block(block, place as u64));
    }
    if !rest.is_empty() {
        let last = match shape.last_chunk::<16>() {
            Some(last) => *last,
            None => {
                let mut last = [0u8; 16];
                last[..rest.len()].copy_from_slice(rest);
                last
            }
        };
        sum = sum.wrapping_add(mix_block(&last, blocks.len() as u64));
    }
    folded_multiply(sum ^ K0, K1)
}

const K0: u64 = 0x243f_6a88_85a3_08d3;
const K1: u64 = 0x1319_8a2e_0370_7344;
const K2: u64 = 0xa409_3822_299f_31d0;
const K3: u64 = 0x082e_fa98_ec4e_6c89;

/// The 128-bit product of `a` and `b`, its halves xored.
fn folded_multiply(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

/// One 16-byte block, keyed by its place, so equal blocks at different places count differently.
fn mix_block(block: &[u8; 16], place: u64) -> u64 {
    let (low, high) = block.split_at(8);
    let word = |half: &[u8]| {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(half);
        u64::from_le_bytes(eight)
    };
    folded_multiply(word(low) ^ place.wrapping_mul(K3) ^ K0, word(high) ^ K1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_reads_digits_or_hex_digits_as_zero_and_keeps_every_other_byte() {
        let line = "rank 12 trace=9f3a é\tXid 79";
        assert_eq!(
            shape_of(line.as_bytes(), Reading::Digits),
            "rank 00 trace=0f0a é\tXid 00".as_bytes()
        );
        assert_eq!(
            shape_of(line.as_bytes(), Reading::Hex),
            "r0nk 00 tr000=0000 é\tXi0 00".as_bytes()
        );
    }

    #[test]
    fn lines_of_one_shape_hash_alike_and_lines_of_other_shapes_or_lengths_do_not() {
        let mut buffer = ShapeBuffer::default();
        let mut hash = |line: &str| {
            let (hash, shape) = buffer
                .shape(line.as_bytes(), line.len(), Reading::Digits)
                .unwrap();
            assert_eq!(shape, shape_of(line.as_bytes(), Reading::Digits));
            hash
        };
        // Every length around the block size, so the padded last block is exercised.
        for length in 1..=40 {
            let line: String = "step 1 loss 2.5 of 3 "
                .repeat(2)
                .chars()
                .take(length)
                .collect();
            let other: String = line.replace(|c: char| c.is_ascii_digit(), "7");
            assert_eq!(hash(&line), hash(&other), "{line:?}");
            assert_ne!(hash(&line), hash(&format!("{line} ")), "{line:?}");
            assert_ne!(hash(&line), hash(&format!("{line}\0")), "{line:?}");
        }
        assert_ne!(hash("step 1 loss"), hash("step 1 lost"));
        // What follows a line in its read (up to its next 16-byte bound) is shaped but not hashed.
        let mut buffer = ShapeBuffer::default();
        for length in [3, 15, 16, 17, 40] {
            let read = "0123456789abcdef".repeat(4);
            let (alone, shape) = buffer
                .shape(&read.as_bytes()[..length], length, Reading::Digits)
                .map(|(hash, shape)| (hash, shape.to_vec()))
                .unwrap();
            let (followed, followed_shape) = buffer
                .shape(read.as_bytes(), length, Reading::Digits)
                .unwrap();
            assert_eq!((alone, shape.as_slice()), (followed, followed_shape));
        }
        assert_ne!(hash(""), hash("\0"));
    }

    #[test]
    fn a_table_finds_what_it_remembers_and_stops_remembering_when_full() {
        let mut table = ShapeTable::default();
        let mut buffer = ShapeBuffer::default();
        for n in 0..MAX_SHAPES + 10 {
            let line = format!("{}-{}", "x".repeat(n % 400), "a".repeat(n / 400));
            let (hash, shape) = buffer
                .shape(line.as_bytes(), line.len(), Reading::Digits)
                .unwrap();
            table.remember(hash, shape, Mark::Plain);
        }
        assert_eq!(table.len(), MAX_SHAPES);
        let (hash, shape) = buffer.shape(b"x-", 2, Reading::Digits).unwrap();
        assert_eq!(table.get(hash, shape), Some(Mark::Plain));
        let (hash, shape) = buffer.shape(b"never seen", 10, Reading::Digits).unwrap();
        assert_eq!(table.get(hash, shape), None);
        assert!(
            buffer
                .shape(
                    &[b'x'; MAX_SHAPE_BYTES + 1],
                    MAX_SHAPE_BYTES + 1,
                    Reading::Digits
                )
                .is_none()
        );
    }
}
