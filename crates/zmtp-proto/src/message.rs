//! Whole multipart messages.

use std::fmt;

use bytes::Bytes;

/// Initial capacity of the frame list of a multipart message: covers `[identity, body]` and the
/// REQ/ROUTER envelope `[identity, empty delimiter, body]` without growing.
const MULTI_CAPACITY: usize = 4;

#[derive(Clone)]
enum Repr {
    /// No frame at all.
    Empty,
    /// Exactly one frame: the common case, which moves, clones and drops as one `Bytes`.
    One(Bytes),
    /// Exactly two frames (every Dafka message with a content: header + content): cloned for
    /// each subscriber of a PUB and built by every decoder, so kept inline (no allocation).
    Two([Bytes; 2]),
    /// Two or more frames (or fewer, after `pop_front`).
    Many(Vec<Bytes>),
}

/// A whole multipart message: one or more frames that travel together.
///
/// > A message consists of one or more frames. [...] A peer SHALL deliver either all the frames
/// > of a message, or none of them. (37/ZMTP, "Messages")
///
/// A [`Connection`](crate::Connection) only ever surfaces complete messages. A message of one
/// or two frames is stored inline (no allocation beyond its [`Bytes`], and small enough to move
/// cheaply through queues); a longer one keeps its frames in one `Vec`.
#[derive(Clone)]
pub struct Message {
    repr: Repr,
}

impl Message {
    /// An empty message (no frames). It must get at least one frame before it can be sent.
    pub fn new() -> Self {
        Message { repr: Repr::Empty }
    }

    /// Appends a frame.
    #[inline]
    pub fn push(&mut self, frame: Bytes) {
        match &mut self.repr {
            Repr::Empty => self.repr = Repr::One(frame),
            Repr::One(first) => self.repr = Repr::Two([std::mem::take(first), frame]),
            Repr::Two([a, b]) => {
                let mut v = Vec::with_capacity(MULTI_CAPACITY);
                v.extend([std::mem::take(a), std::mem::take(b), frame]);
                self.repr = Repr::Many(v);
            }
            Repr::Many(v) => v.push(frame),
        }
    }

    /// Inserts a frame before the first one (adds an envelope frame).
    pub fn push_front(&mut self, frame: Bytes) {
        match &mut self.repr {
            Repr::Empty => self.repr = Repr::One(frame),
            Repr::One(first) => self.repr = Repr::Two([frame, std::mem::take(first)]),
            Repr::Two([a, b]) => {
                let mut v = Vec::with_capacity(MULTI_CAPACITY);
                v.extend([frame, std::mem::take(a), std::mem::take(b)]);
                self.repr = Repr::Many(v);
            }
            Repr::Many(v) => v.insert(0, frame),
        }
    }

    /// Removes and returns the first frame (strips an envelope frame).
    pub fn pop_front(&mut self) -> Option<Bytes> {
        match &mut self.repr {
            Repr::Empty => None,
            Repr::One(_) => match std::mem::replace(&mut self.repr, Repr::Empty) {
                Repr::One(first) => Some(first),
                _ => None,
            },
            Repr::Two([a, b]) => {
                let first = std::mem::take(a);
                self.repr = Repr::One(std::mem::take(b));
                Some(first)
            }
            Repr::Many(v) => {
                if v.is_empty() {
                    None
                } else {
                    Some(v.remove(0))
                }
            }
        }
    }

    /// Removes the first `n` frames (all of them if there are fewer) and returns them as a
    /// message of their own, keeping the rest in `self`, in O(frames) (an envelope is split off
    /// at once rather than with repeated [`pop_front`](Self::pop_front)).
    pub fn split_front(&mut self, n: usize) -> Message {
        let n = n.min(self.len());
        if let Repr::Many(v) = &mut self.repr {
            let rest = v.split_off(n);
            let front = std::mem::take(v);
            *self = Message::from(rest);
            return Message::from(front);
        }
        let mut front = Message::new();
        for _ in 0..n {
            if let Some(frame) = self.pop_front() {
                front.push(frame);
            }
        }
        front
    }

    /// The frames, in order.
    pub fn frames(&self) -> &[Bytes] {
        match &self.repr {
            Repr::Empty => &[],
            Repr::One(first) => std::slice::from_ref(first),
            Repr::Two(both) => both,
            Repr::Many(v) => v,
        }
    }

    /// The frames, mutable in place (to take some out: the message keeps its shape).
    pub fn frames_mut(&mut self) -> &mut [Bytes] {
        match &mut self.repr {
            Repr::Empty => &mut [],
            Repr::One(first) => std::slice::from_mut(first),
            Repr::Two(both) => both,
            Repr::Many(v) => v,
        }
    }

    /// Consumes the message into its frames.
    pub fn into_frames(self) -> Vec<Bytes> {
        match self.repr {
            Repr::Empty => Vec::new(),
            Repr::One(first) => vec![first],
            Repr::Two(both) => Vec::from(both),
            Repr::Many(v) => v,
        }
    }

    /// Iterates over the frames.
    pub fn iter(&self) -> std::slice::Iter<'_, Bytes> {
        self.frames().iter()
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Empty => 0,
            Repr::One(_) => 1,
            Repr::Two(_) => 2,
            Repr::Many(v) => v.len(),
        }
    }

    /// Whether the message has no frames.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sum of the frame sizes in bytes.
    pub fn byte_len(&self) -> usize {
        match &self.repr {
            Repr::Empty => 0,
            Repr::One(first) => first.len(),
            Repr::Two([a, b]) => a.len() + b.len(),
            Repr::Many(v) => v.iter().map(Bytes::len).sum(),
        }
    }
}

impl Default for Message {
    fn default() -> Self {
        Message::new()
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.frames()).finish()
    }
}

impl PartialEq for Message {
    fn eq(&self, other: &Self) -> bool {
        self.frames() == other.frames()
    }
}

impl Eq for Message {}

impl From<Bytes> for Message {
    /// A single-frame message.
    fn from(frame: Bytes) -> Self {
        Message {
            repr: Repr::One(frame),
        }
    }
}

impl From<&[u8]> for Message {
    /// A single-frame message, copying the bytes.
    fn from(frame: &[u8]) -> Self {
        Message::from(Bytes::copy_from_slice(frame))
    }
}

impl From<Vec<Bytes>> for Message {
    fn from(mut frames: Vec<Bytes>) -> Self {
        let repr = match frames.len() {
            0 => Repr::Empty,
            1 => frames.pop().map_or(Repr::Empty, Repr::One),
            2 => {
                let b = frames.pop().unwrap_or_default();
                let a = frames.pop().unwrap_or_default();
                Repr::Two([a, b])
            }
            _ => Repr::Many(frames),
        };
        Message { repr }
    }
}

impl FromIterator<Bytes> for Message {
    fn from_iter<I: IntoIterator<Item = Bytes>>(iter: I) -> Self {
        let mut m = Message::new();
        m.extend(iter);
        m
    }
}

/// Appends frames: one or two stay inline; more are collected in one allocation sized from
/// the iterator's lower bound.
impl Extend<Bytes> for Message {
    #[inline]
    fn extend<I: IntoIterator<Item = Bytes>>(&mut self, frames: I) {
        let frames = frames.into_iter();
        let total = self.len() + frames.size_hint().0;
        if total > 2 {
            let mut v = Vec::with_capacity(total);
            match std::mem::replace(&mut self.repr, Repr::Empty) {
                Repr::Empty => {}
                Repr::One(a) => v.push(a),
                Repr::Two([a, b]) => v.extend([a, b]),
                Repr::Many(mut old) => {
                    old.reserve(total - old.len());
                    v = old;
                }
            }
            v.extend(frames);
            self.repr = Repr::Many(v);
            return;
        }
        for frame in frames {
            self.push(frame);
        }
    }
}

impl<'a> IntoIterator for &'a Message {
    type Item = &'a Bytes;
    type IntoIter = std::slice::Iter<'a, Bytes>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extend_keeps_two_frames_inline_and_sizes_many_once() {
        let mut m = Message::new();
        m.extend([Bytes::from_static(b"h"), Bytes::from_static(b"c")]);
        assert!(matches!(m.repr, Repr::Two(_)));
        let mut m = Message::from(Bytes::from_static(b"h"));
        m.extend((0..100u8).map(|i| Bytes::from(vec![i])));
        let Repr::Many(v) = &m.repr else {
            panic!("not many")
        };
        assert_eq!(v.capacity(), 101);
        assert_eq!(m.len(), 101);
        assert_eq!(&m.frames()[0][..], b"h");
        assert_eq!(&m.frames()[100][..], &[99]);
        let mut m = Message::new();
        m.extend(std::iter::once(Bytes::from_static(b"one")));
        assert_eq!(m, Message::from(Bytes::from_static(b"one")));
    }

    fn b(s: &'static str) -> Bytes {
        Bytes::from_static(s.as_bytes())
    }

    #[test]
    fn push_spills_past_inline_capacity_and_keeps_order() {
        let mut m = Message::new();
        assert!(m.is_empty());
        let names = ["a", "bb", "ccc", "dddd", "eeeee"];
        for (i, n) in names.iter().enumerate() {
            m.push(b(n));
            assert_eq!(m.len(), i + 1);
        }
        assert_eq!(m.frames(), &names.map(b)[..]);
        assert_eq!(m.byte_len(), 15);
        assert_eq!(m.clone().into_frames(), names.map(b).to_vec());
    }

    #[test]
    fn two_frames_from_a_vec_by_push_and_by_push_front_agree() {
        let v = vec![b("h"), b("content")];
        let mut pushed = Message::new();
        pushed.push(b("h"));
        pushed.push(b("content"));
        let mut fronted = Message::from(b("content"));
        fronted.push_front(b("h"));
        for m in [&Message::from(v.clone()), &pushed, &fronted] {
            assert_eq!(m.frames(), &v[..]);
            assert_eq!((m.len(), m.byte_len()), (2, 8));
            assert_eq!(m.clone().into_frames(), v);
        }
        pushed.push(b("x"));
        assert_eq!(pushed.frames(), &[b("h"), b("content"), b("x")][..]);
        fronted.push_front(b("id"));
        assert_eq!(fronted.frames(), &[b("id"), b("h"), b("content")][..]);
    }

    #[test]
    fn envelope_push_front_and_pop_front_inline_and_heap() {
        for extra in 0..6 {
            let mut m: Message = (0..extra).map(|i| Bytes::from(vec![i as u8])).collect();
            m.push_front(b("id"));
            assert_eq!(m.len(), extra + 1);
            assert_eq!(m.frames()[0], b("id"));
            assert_eq!(m.pop_front(), Some(b("id")));
            for i in 0..extra {
                assert_eq!(m.pop_front(), Some(Bytes::from(vec![i as u8])));
            }
            assert_eq!(m.pop_front(), None);
            assert!(m.is_empty());
        }
    }

    #[test]
    fn split_front_keeps_both_halves_in_order() {
        for total in 0..7usize {
            for n in 0..=total + 1 {
                let all: Vec<Bytes> = (0..total).map(|i| Bytes::from(vec![i as u8])).collect();
                let mut m = Message::from(all.clone());
                let front = m.split_front(n);
                let k = n.min(total);
                assert_eq!(front.frames(), &all[..k]);
                assert_eq!(m.frames(), &all[k..]);
            }
        }
    }

    #[test]
    fn conversions_agree() {
        let v = vec![b("x"), b("y"), b("z"), b("w")];
        let a = Message::from(v.clone());
        let c: Message = v.iter().cloned().collect();
        assert_eq!(a, c);
        assert_eq!(Message::from(&b"hi"[..]), Message::from(b("hi")));
        assert_eq!(format!("{:?}", Message::from(b("hi"))), "[b\"hi\"]");
        assert_ne!(Message::from(b("x")), Message::new());
    }
}
