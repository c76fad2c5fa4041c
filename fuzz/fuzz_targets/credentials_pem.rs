//! Credentials from PEM, every argument combination: the client's `WorkerCredentials::from_pem`
//! (CA, optional key and certificate, mutual or not, optional identity) and the worker's checks
//! of its certificate, key and optional client CA. Never panics; a refusal is an
//! InvalidArgument with a message; accepted credentials say what they were made with.
//!
//! Input: one flags byte (bit 0 mutual, 1 key given, 2 certificate given, 3 identity given,
//! 4 the worker side gets a client CA), then the CA, key, certificate and identity texts,
//! separated by the line `--8<--` (so that seeds are PEM files pasted together).
#![no_main]

use libfuzzer_sys::fuzz_target;
use libwool::connection::ErrorKind;
use libwool::WorkerCredentials;

const SEPARATOR: &[u8] = b"\n--8<--\n";

fn fields(mut data: &[u8]) -> Vec<&[u8]> {
    let mut fields = Vec::new();
    while let Some(at) = data.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) {
        fields.push(&data[..at]);
        data = &data[at + SEPARATOR.len()..];
    }
    fields.push(data);
    fields
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let fields = fields(rest);
    let field = |i: usize| fields.get(i).copied().unwrap_or_default();
    let mutual = flags & 1 != 0;
    let key = (flags & 2 != 0).then(|| field(1));
    let cert = (flags & 4 != 0).then(|| field(2));
    let identity = (flags & 8 != 0).then(|| String::from_utf8_lossy(field(3)).into_owned());
    match WorkerCredentials::from_pem(field(0), key, cert, mutual, identity.as_deref()) {
        Ok(credentials) => {
            assert_eq!(credentials.is_mutual(), mutual);
            let renamed = credentials
                .with_identity("localhost")
                .expect("a valid name");
            assert_eq!(renamed.identity(), Some("localhost"));
        }
        Err(error) => {
            assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
            assert!(!error.to_string().is_empty());
        }
    }
    let client_ca = (flags & 16 != 0).then(|| field(0));
    libwool::fuzzing::server_credentials(field(2), field(1), client_ca);
});
