//! The C ABI driven by arbitrary calls, as a careless host would make them: NULLs, non-UTF-8
//! and unterminated-looking texts (cut at their first NUL, as C sees them), NaN, ±infinity,
//! subnormal and huge timeouts and graces, sizes up to `SIZE_MAX`, calls on freed slots (left
//! out: that is the host's undefined behaviour, not the library's). Every call must return a
//! status with a message on failure, never panic (the boundary would abort the fuzzer) or
//! hang. Calls that do I/O only reach a Unix socket path that does not exist, so no input
//! makes traffic leave this machine; connections to fuzzed targets are made and freed
//! without a call.
#![no_main]

use std::ffi::{c_char, CString};
use std::ptr;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use wool::*;

/// Where every call that does I/O goes: refused at once, whatever the timeout.
const NOWHERE: &str = "unix:/nonexistent-wool-fuzz/worker.sock";

#[derive(Arbitrary, Debug)]
enum Text {
    Null,
    Bytes(Vec<u8>),
}

impl Text {
    /// The text as C would see it (cut at its first NUL), kept alive by the returned value.
    fn c(&self) -> Option<CString> {
        match self {
            Text::Null => None,
            Text::Bytes(bytes) => {
                let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
                Some(CString::new(&bytes[..end]).expect("cut at the first NUL"))
            }
        }
    }
}

fn ptr_of(text: &Option<CString>) -> *const c_char {
    text.as_ref().map_or(ptr::null(), |t| t.as_ptr())
}

#[derive(Arbitrary, Debug)]
enum Op {
    ConnectTo {
        target: Text,
        with_options: bool,
    },
    Connect {
        with_options: bool,
    },
    Idle {
        slot: u8,
        timeout: f64,
    },
    Stop {
        slot: u8,
        grace: f64,
        timeout: f64,
    },
    Free {
        slot: u8,
    },
    CredentialsPem {
        ca: Text,
        key: Text,
        cert: Text,
        mutual: bool,
        identity: Text,
    },
    CredentialsFiles {
        ca: Text,
        key: Text,
        cert: Text,
        mutual: bool,
        identity: Text,
        reloadable: bool,
    },
    SetOption {
        which: u8,
        seconds: f64,
        size: usize,
        flag: bool,
        pings: u32,
    },
    LastError {
        len: u16,
        null: bool,
    },
    StatusName {
        value: i32,
    },
    ReasonName {
        value: i32,
    },
    IdleMany {
        slots: Vec<u8>,
        timeout: f64,
        max_in_flight: usize,
    },
    Retire {
        slots: Vec<u8>,
        threshold: f64,
        grace: f64,
        stop_timeout: f64,
        keep_min: usize,
        max_stops: usize,
        dry_run: bool,
        poll_timeout: f64,
    },
    Start {
        slot: u8,
        timeout: f64,
        stop: Option<f64>,
        tag: u64,
    },
    Cancel {
        call: u64,
    },
    Next {
        capacity: u8,
        timeout: f64,
    },
    Discover {
        namespace: Text,
        backend: i32,
        listen: f64,
    },
    Watch {
        namespace: Text,
        backend: i32,
        timeout: f64,
    },
}

/// A fuzzed wait, kept short: a NaN, a negative or an infinite one is passed as it is (the
/// library must refuse or treat it as documented); a finite positive one is capped so that
/// an input cannot make the fuzzer sleep.
fn short(seconds: f64) -> f64 {
    if seconds.is_finite() && seconds > 0.05 {
        0.05
    } else {
        seconds
    }
}

/// A fuzzed discovery backend, never the LAN one (it would send multicast DNS): local
/// registries only.
fn local_only(backend: i32) -> i32 {
    if backend == WOOL_DISCOVERY_LAN {
        WOOL_DISCOVERY_LOCAL
    } else {
        backend
    }
}

struct World {
    connections: Vec<*mut wool_connection>,
    options: *mut wool_channel_options,
    credentials: *mut wool_credentials,
    queue: *mut wool_queue,
    calls: Vec<u64>,
}

impl World {
    /// A live connection, or NULL (one slot past the live ones).
    fn slot(&self, slot: u8) -> *const wool_connection {
        let index = usize::from(slot) % (self.connections.len() + 1);
        self.connections
            .get(index)
            .map_or(ptr::null(), |conn| conn.cast_const())
    }

    fn check(&self, status: wool_status) {
        if status != wool_status::Ok {
            // SAFETY: a NULL buffer with length 0 asks for the length only.
            let len = unsafe { wool_last_error(ptr::null_mut(), 0) };
            assert!(len > 0, "a failure without a message: {status:?}");
            assert!(!wool_status_name(status as i32).is_null());
        }
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let mut world = World {
        connections: Vec::new(),
        options: ptr::null_mut(),
        credentials: ptr::null_mut(),
        queue: ptr::null_mut(),
        calls: Vec::new(),
    };
    // SAFETY (all below): every pointer passed is NULL, a live handle of `world`, or points at
    // a live local of the right type and size, as the header's contracts require.
    unsafe {
        assert_eq!(
            wool_channel_options_new(&mut world.options),
            wool_status::Ok
        );
        assert_eq!(wool_queue_new(&mut world.queue), wool_status::Ok);
        for op in ops.into_iter().take(64) {
            match op {
                Op::ConnectTo {
                    target,
                    with_options,
                } => {
                    let target = target.c();
                    let mut conn = ptr::null_mut();
                    let status = if with_options {
                        wool_connect_with_options(
                            ptr_of(&target),
                            world.credentials,
                            world.options,
                            &mut conn,
                        )
                    } else {
                        wool_connect(ptr_of(&target), world.credentials, &mut conn)
                    };
                    world.check(status);
                    assert_eq!(status == wool_status::Ok, !conn.is_null());
                    wool_free(conn); // no call: a fuzzed target may name any host
                }
                Op::Connect { with_options } => {
                    let target = CString::new(NOWHERE).unwrap();
                    let mut conn = ptr::null_mut();
                    let options = if with_options {
                        world.options.cast_const()
                    } else {
                        ptr::null()
                    };
                    let status = wool_connect_with_options(
                        target.as_ptr(),
                        world.credentials,
                        options,
                        &mut conn,
                    );
                    world.check(status);
                    if status == wool_status::Ok {
                        world.connections.push(conn);
                    }
                }
                Op::Idle { slot, timeout } => {
                    let mut seconds = -1.0;
                    let status = wool_idle(world.slot(slot), short(timeout), &mut seconds);
                    assert_ne!(status, wool_status::Ok, "nothing listens at {NOWHERE}");
                    world.check(status);
                }
                Op::Stop {
                    slot,
                    grace,
                    timeout,
                } => {
                    let status = wool_stop(world.slot(slot), grace, short(timeout));
                    assert_ne!(status, wool_status::Ok);
                    world.check(status);
                }
                Op::Free { slot } => {
                    if !world.connections.is_empty() {
                        let index = usize::from(slot) % world.connections.len();
                        wool_free(world.connections.swap_remove(index));
                    }
                }
                Op::CredentialsPem {
                    ca,
                    key,
                    cert,
                    mutual,
                    identity,
                } => {
                    let (ca, key, cert, identity) = (ca.c(), key.c(), cert.c(), identity.c());
                    let mut made = ptr::null_mut();
                    let status = wool_credentials_from_pem(
                        ptr_of(&ca),
                        ptr_of(&key),
                        ptr_of(&cert),
                        mutual,
                        ptr_of(&identity),
                        &mut made,
                    );
                    world.check(status);
                    if !made.is_null() {
                        wool_credentials_free(std::mem::replace(&mut world.credentials, made));
                    }
                }
                Op::CredentialsFiles {
                    ca,
                    key,
                    cert,
                    mutual,
                    identity,
                    reloadable,
                } => {
                    let (ca, key, cert, identity) = (ca.c(), key.c(), cert.c(), identity.c());
                    let mut made = ptr::null_mut();
                    let make = if reloadable {
                        wool_credentials_from_files_reloadable
                    } else {
                        wool_credentials_from_files
                    };
                    let status = make(
                        ptr_of(&ca),
                        ptr_of(&key),
                        ptr_of(&cert),
                        mutual,
                        ptr_of(&identity),
                        &mut made,
                    );
                    world.check(status);
                    wool_credentials_free(made);
                }
                Op::SetOption {
                    which,
                    seconds,
                    size,
                    flag,
                    pings,
                } => {
                    let options = if which & 0x80 != 0 {
                        ptr::null_mut()
                    } else {
                        world.options
                    };
                    let status = match which % 8 {
                        0 => wool_channel_options_set_max_receive_message_bytes(options, size),
                        1 => wool_channel_options_set_max_send_message_bytes(options, size),
                        2 => wool_channel_options_set_keepalive_interval(options, seconds),
                        3 => wool_channel_options_set_keepalive_timeout(options, seconds),
                        4 => wool_channel_options_set_keepalive_without_calls(options, flag),
                        5 => wool_channel_options_set_max_pings_without_data(options, pings),
                        6 => wool_channel_options_set_max_concurrent_streams(options, size),
                        _ => wool_channel_options_set_connect_timeout(options, short(seconds)),
                    };
                    world.check(status);
                }
                Op::LastError { len, null } => {
                    let len = usize::from(len);
                    let mut buf = vec![0x55_u8; len];
                    let full = if null {
                        wool_last_error(ptr::null_mut(), 0)
                    } else {
                        wool_last_error(buf.as_mut_ptr().cast(), len)
                    };
                    if !null && len > 0 {
                        let copied = buf.iter().position(|b| *b == 0).expect("NUL-terminated");
                        assert!(copied <= full && copied < len);
                        assert!(
                            std::str::from_utf8(&buf[..copied]).is_ok(),
                            "cut inside a character"
                        );
                    }
                }
                Op::StatusName { value } => assert!(!wool_status_name(value).is_null()),
                Op::ReasonName { value } => assert!(!wool_retire_reason_name(value).is_null()),
                Op::IdleMany {
                    slots,
                    timeout,
                    max_in_flight,
                } => {
                    let conns: Vec<*const wool_connection> =
                        slots.iter().take(16).map(|s| world.slot(*s)).collect();
                    let mut seconds = vec![0.0; conns.len()];
                    let mut statuses = vec![wool_status::Ok; conns.len()];
                    let mut codes = vec![0; conns.len()];
                    let status = wool_idle_many(
                        conns.as_ptr(),
                        conns.len(),
                        short(timeout),
                        max_in_flight,
                        seconds.as_mut_ptr(),
                        statuses.as_mut_ptr(),
                        codes.as_mut_ptr(),
                    );
                    world.check(status);
                }
                Op::Retire {
                    slots,
                    threshold,
                    grace,
                    stop_timeout,
                    keep_min,
                    max_stops,
                    dry_run,
                    poll_timeout,
                } => {
                    let conns: Vec<*const wool_connection> =
                        slots.iter().take(16).map(|s| world.slot(*s)).collect();
                    let policy = wool_retire_policy {
                        idle_threshold: threshold,
                        grace,
                        stop_timeout: short(stop_timeout),
                        keep_min,
                        max_stops,
                        dry_run,
                    };
                    let mut decisions =
                        vec![std::mem::zeroed::<wool_retire_decision>(); conns.len()];
                    let status = wool_retire_idle(
                        conns.as_ptr(),
                        conns.len(),
                        &policy,
                        short(poll_timeout),
                        4,
                        decisions.as_mut_ptr(),
                    );
                    world.check(status);
                }
                Op::Start {
                    slot,
                    timeout,
                    stop,
                    tag,
                } => {
                    let mut call = 0;
                    let status = match stop {
                        None => wool_idle_start(
                            world.slot(slot),
                            world.queue,
                            short(timeout),
                            tag,
                            &mut call,
                        ),
                        Some(grace) => wool_stop_start(
                            world.slot(slot),
                            world.queue,
                            grace,
                            short(timeout),
                            tag,
                            &mut call,
                        ),
                    };
                    world.check(status);
                    if status == wool_status::Ok {
                        world.calls.push(call);
                    }
                }
                Op::Cancel { call } => {
                    let call = world
                        .calls
                        .get(call as usize % (world.calls.len() + 1))
                        .copied()
                        .unwrap_or(call);
                    world.check(wool_cancel(world.queue, call));
                }
                Op::Next { capacity, timeout } => {
                    let capacity = usize::from(capacity % 8);
                    let mut out = vec![std::mem::zeroed::<wool_completion>(); capacity];
                    let mut count = usize::MAX;
                    let status = wool_queue_next(
                        world.queue,
                        out.as_mut_ptr(),
                        capacity,
                        short(timeout),
                        &mut count,
                    );
                    world.check(status);
                    if status == wool_status::Ok {
                        assert!(count <= capacity);
                    }
                }
                Op::Discover {
                    namespace,
                    backend,
                    listen,
                } => {
                    let backend = local_only(backend);
                    let namespace = namespace.c();
                    let mut list = ptr::null_mut();
                    let status =
                        wool_discover(ptr_of(&namespace), backend, short(listen), &mut list);
                    world.check(status);
                    wool_worker_list_free(list);
                }
                Op::Watch {
                    namespace,
                    backend,
                    timeout,
                } => {
                    let backend = local_only(backend);
                    let namespace = namespace.c();
                    let mut watch = ptr::null_mut();
                    let status = wool_watch_new(ptr_of(&namespace), backend, &mut watch);
                    world.check(status);
                    if !watch.is_null() {
                        let (mut kind, mut worker) = (0, ptr::null());
                        world.check(wool_watch_next(
                            watch,
                            short(timeout),
                            &mut kind,
                            &mut worker,
                        ));
                    }
                    wool_watch_free(watch);
                }
            }
        }
        for conn in world.connections.drain(..) {
            wool_free(conn);
        }
        wool_queue_free(world.queue);
        wool_channel_options_free(world.options);
        wool_credentials_free(world.credentials);
    }
});
