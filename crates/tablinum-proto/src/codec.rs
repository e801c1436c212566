//! The gRPC codec every generated client and server uses: prost's, except
//! that a message is encoded into a buffer reserved for its whole length
//! first. Appends and scan batches run to megabytes; growing the buffer as
//! the message is written copied it about once more and faulted in fresh
//! pages at every doubling.
//!
//! Owns encoding and decoding of one message; never changes a byte of the
//! wire format (docs/format.md is unaffected). Every test that talks gRPC
//! goes through it.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder};
use tonic::Status;

/// The codec named in `build.rs` (`codec_path`).
#[derive(Debug, Clone)]
pub struct ReservingCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for ReservingCodec<T, U> {
    fn default() -> Self {
        ReservingCodec(PhantomData)
    }
}

impl<T, U> Codec for ReservingCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ReservingEncoder<T>;
    type Decoder = tonic_prost::ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ReservingEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::new(BufferSettings::default())
    }
}

/// Encodes one message into a buffer with room for all of it.
#[derive(Debug, Clone)]
pub struct ReservingEncoder<T>(PhantomData<T>);

impl<T: Message> Encoder for ReservingEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.reserve(item.encoded_len());
        item.encode(buf)
            .map_err(|e| Status::internal(format!("encoding a message: {e}")))
    }
}
