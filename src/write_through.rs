//! `write_through_to_inner!`, the `AsyncWrite` of a connection wrapper whose writes go unchanged
//! to its `inner` connection: the client's first-bytes watcher (`connection::transport`) and the
//! server's connection wrappers (`server::io`), which differ only in what they do on a read.

/// Implements tokio's `AsyncWrite` for `$wrapper<IO>` (a struct with a field `inner: IO`) by
/// passing every call, vectored writes included, to `inner`.
macro_rules! write_through_to_inner {
    ($wrapper:ident) => {
        impl<IO: ::tokio::io::AsyncWrite + Unpin> ::tokio::io::AsyncWrite for $wrapper<IO> {
            fn poll_write(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                buf: &[u8],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                ::std::pin::Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                bufs: &[::std::io::IoSlice<'_>],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                ::std::pin::Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.inner.is_write_vectored()
            }

            fn poll_flush(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                ::std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
            }

            fn poll_shutdown(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                ::std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
            }
        }
    };
}
