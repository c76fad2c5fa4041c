//! Status repair: making the gRPC status fields a worker sent safe for tonic to read, keeping
//! the worker's code and words.

use super::percent::{percent_decode, percent_encoded};

/// Makes the gRPC status a worker put in a response's head (trailers-only) or trailers safe
/// for tonic to read, keeping what the worker said. tonic's `Status::from_header_map` reads
/// these fields, and a hostile or broken worker can make it:
///
/// - panic (it `expect`s a `grpc-status-details-bin` to be base64), which would crash the
///   caller's thread, or a C host's call: such details are dropped;
/// - throw the worker's code away for UNKNOWN when `grpc-message` does not percent-decode to
///   UTF-8 (so an UNAVAILABLE worker would be evicted as an RPC error, where the gRPC spec
///   says a bad message must never cost the status): the message is replaced by its lossy
///   decoding (U+FFFD for the bad bytes), percent-encoded again;
/// - report a `grpc-status` that is no code (`abc`, `99`) as a bare UNKNOWN with no word of
///   what came: it is made UNKNOWN (2, as tonic and gRPC read it) with a message saying what
///   the worker sent, ahead of the worker's own message.
pub(super) fn readable_status(headers: &mut http::HeaderMap) {
    use base64::Engine;
    use http::HeaderName;
    // Names, not strings: a lookup by a string parses it into a name first, on every call.
    static DETAILS: HeaderName = HeaderName::from_static("grpc-status-details-bin");
    static MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
    static STATUS: HeaderName = HeaderName::from_static("grpc-status");
    if headers.is_empty() {
        return;
    }
    // tonic decodes the details with the standard alphabet, padding optional.
    let decodes = |value: &http::HeaderValue| {
        base64::engine::general_purpose::STANDARD_PAD_INDIFFERENT
            .decode(value.as_bytes())
            .is_ok()
    };
    if headers.get(&DETAILS).is_some_and(|value| !decodes(value)) {
        tracing::debug!("the worker's {DETAILS} is not base64: dropped");
        headers.remove(&DETAILS);
    }
    if let Some(message) = headers.get(&MESSAGE) {
        let decoded = percent_decode(message.as_bytes());
        if std::str::from_utf8(&decoded).is_err() {
            let lossy = String::from_utf8_lossy(&decoded).into_owned();
            headers.insert(MESSAGE.clone(), percent_encoded(&lossy));
        }
    }
    let Some(status) = headers.get(&STATUS) else {
        return;
    };
    let code = status.as_bytes();
    if tonic::Code::from_bytes(code) != tonic::Code::Unknown || code == b"2" {
        return;
    }
    let mut message = format!(
        "the worker sent grpc-status \"{}\", which is no gRPC status code (read as UNKNOWN)",
        code.escape_ascii()
    );
    if let Some(own) = headers.get(&MESSAGE) {
        let own = String::from_utf8_lossy(&percent_decode(own.as_bytes())).into_owned();
        if !own.is_empty() {
            message = format!("{message}: {own}");
        }
    }
    headers.insert(STATUS.clone(), http::HeaderValue::from_static("2"));
    headers.insert(MESSAGE.clone(), percent_encoded(&message));
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_workers_status_fields_are_made_readable_without_losing_its_code() {
        use super::readable_status;
        let read = |fields: &[(&'static str, &'static str)]| {
            let mut headers = http::HeaderMap::new();
            for (name, value) in fields {
                headers.insert(*name, http::HeaderValue::from_static(value));
            }
            readable_status(&mut headers);
            let status = tonic::Status::from_header_map(&headers).expect("a status");
            (status.code(), status.message().to_string(), headers)
        };
        // Good fields pass untouched.
        let (code, message, headers) = read(&[
            ("grpc-status", "14"),
            ("grpc-message", "100%25 busy"),
            ("grpc-status-details-bin", "QUJD"),
        ]);
        assert_eq!(
            (code, message.as_str()),
            (tonic::Code::Unavailable, "100% busy")
        );
        assert!(headers.contains_key("grpc-status-details-bin"));
        // Details that are not base64 (tonic would panic) are dropped.
        let (code, _, headers) = read(&[("grpc-status", "14"), ("grpc-status-details-bin", "!!")]);
        assert_eq!(code, tonic::Code::Unavailable);
        assert!(!headers.contains_key("grpc-status-details-bin"));
        // A message that is not UTF-8 keeps the code, decoded lossily.
        let (code, message, _) = read(&[("grpc-status", "14"), ("grpc-message", "busy %FF%FE")]);
        assert_eq!(
            (code, message.as_str()),
            (tonic::Code::Unavailable, "busy \u{FFFD}\u{FFFD}")
        );
        // Lone and malformed escapes stand for themselves, as tonic reads them.
        let (_, message, _) = read(&[("grpc-status", "14"), ("grpc-message", "%zz 100% %4")]);
        assert_eq!(message, "%zz 100% %4");
        // A status that is no code is UNKNOWN, saying what came.
        for (sent, own) in [("abc", ""), ("99", "on fire"), ("", ""), ("014", "")] {
            let fields = [("grpc-status", sent), ("grpc-message", own)];
            let (code, message, _) = read(if own.is_empty() {
                &fields[..1]
            } else {
                &fields
            });
            assert_eq!(code, tonic::Code::Unknown, "{sent:?}");
            assert!(
                message.contains(&format!("grpc-status \"{sent}\"")),
                "{message}"
            );
            assert!(message.ends_with(own), "{message}");
        }
        let (code, message, _) = read(&[("grpc-status", "2"), ("grpc-message", "own words")]);
        assert_eq!(
            (code, message.as_str()),
            (tonic::Code::Unknown, "own words")
        );
    }
}
