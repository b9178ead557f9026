//! Response bodies: whole JSON documents, and streams fed by a task that hyper sends chunk by chunk
//! as they come (watches, followed logs).

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Bytes, Frame};
use tokio::sync::mpsc;

pub type ResponseBody = BoxBody<Bytes, io::Error>;

/// A chunk to send, or an error that makes hyper drop the connection mid-stream, as a network
/// failure would.
pub type Chunk = Result<Bytes, io::Error>;

/// Chunks buffered between the producing task and the connection.
const STREAM_BUFFER: usize = 64;

struct ChannelBody {
    chunks: mpsc::Receiver<Chunk>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.get_mut()
            .chunks
            .poll_recv(context)
            .map(|chunk| chunk.map(|chunk| chunk.map(Frame::data)))
    }
}

/// A body of unknown length, so hyper sends it chunked; it ends when the sender is dropped.
pub fn stream() -> (mpsc::Sender<Chunk>, ResponseBody) {
    let (sender, chunks) = mpsc::channel(STREAM_BUFFER);
    (sender, BoxBody::new(ChannelBody { chunks }))
}

pub fn full(bytes: impl Into<Bytes>) -> ResponseBody {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

/// The error a cut stream ends with.
pub fn cut() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "stream cut by the test")
}
