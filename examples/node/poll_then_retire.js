// poll_then_retire: Node.js polls a Wool worker's idle time and retires it, by dlopen-ing the
// released libwool.so through koffi (an FFI from the npm registry, pinned in package.json and
// package-lock.json). No binding package: each C function used is declared here from
// include/wool.h, and every decision (target parsing, gRPC, error kinds) stays in the library.
//
//   npm ci
//   LIBWOOL_PATH=/opt/libwool/lib/libwool.so node poll_then_retire.js 127.0.0.1:50051
//
// LIBWOOL_PATH (or the second argument) names the libwool.so to load, e.g. lib/libwool.so out
// of the unpacked C archive libwool-<version>-<arch>-linux-gnu.tar.gz.
//
// It prints the library's version, connects, polls the worker's idle seconds (5 s deadline),
// stops it (grace 0: it is idle; 10 s deadline), frees the handle, and then shows a failure:
// connecting to a target without a port gives WOOL_STATUS_INVALID_ARGUMENT, and
// wool_last_error gives its message. Exits 0 when all of that went as described, 1 otherwise
// (printing the status name, the gRPC code and the library's message).
'use strict';

const koffi = require('koffi');

const [address, libArg] = process.argv.slice(2);
const libPath = libArg || process.env.LIBWOOL_PATH;
if (!address || !libPath) {
    console.error('usage: LIBWOOL_PATH=/path/to/libwool.so node poll_then_retire.js ADDRESS');
    process.exit(2);
}

// wool_status is a C enum: an int. WOOL_STATUS_OK is 0, WOOL_STATUS_INVALID_ARGUMENT is 1.
const WOOL_STATUS_OK = 0;
const WOOL_STATUS_INVALID_ARGUMENT = 1;
let wool;

// Loads the library (dlopen) and declares the part of wool.h used here.
function load(path) {
    let lib;
    try {
        lib = koffi.load(path);
    } catch (err) {
        throw new Error(`cannot load ${path}: ${err.message}`);
    }
    koffi.opaque('wool_connection');
    koffi.opaque('wool_credentials');
    return {
        version: lib.func('const char *wool_version(void)'),
        connect: lib.func(
            'int wool_connect(const char *target, const wool_credentials *credentials, _Out_ wool_connection **out)'),
        idle: lib.func(
            'int wool_idle(const wool_connection *conn, double timeout_seconds, _Out_ double *out_seconds)'),
        stop: lib.func('int wool_stop(const wool_connection *conn, double grace_seconds, double timeout_seconds)'),
        free: lib.func('void wool_free(wool_connection *conn)'),
        lastError: lib.func('size_t wool_last_error(_Out_ uint8_t *buf, size_t len)'),
        lastRpcCode: lib.func('int32_t wool_last_rpc_code(void)'),
        statusName: lib.func('const char *wool_status_name(int status)'),
    };
}

// The message of this thread's most recent failure (the library keeps it per thread; koffi's
// synchronous calls all run on Node's main thread). The first call asks for the length.
function lastError() {
    const len = Number(wool.lastError(null, 0));
    const buf = Buffer.alloc(len + 1);
    wool.lastError(buf, buf.length);
    return buf.toString('utf8', 0, len);
}

function describe(status) {
    return `${wool.statusName(status)} (gRPC ${wool.lastRpcCode()}): ${lastError()}`;
}

function check(what, status) {
    if (status !== WOOL_STATUS_OK) {
        throw new Error(`${what}: ${describe(status)}`);
    }
}

function main() {
    wool = load(libPath);
    console.log(`libwool ${wool.version()} loaded from ${libPath}`);

    const out = [null];
    check(`wool_connect(${address})`, wool.connect(address, null, out));
    const conn = out[0];
    try {
        const idle = [0];
        check('wool_idle', wool.idle(conn, 5.0, idle));
        console.log(`idle ${idle[0].toFixed(3)} s`);
        if (!(idle[0] >= 0)) {
            throw new Error(`wool_idle gave ${idle[0]} seconds`);
        }
        check('wool_stop', wool.stop(conn, 0.0, 10.0));
        console.log('stopped: the worker drained and answered the stop');
    } finally {
        wool.free(conn);
    }

    // A failure: the library refuses a target without a port and says why.
    const bad = [null];
    const status = wool.connect('no-port', null, bad);
    const message = lastError();
    console.log(`wool_connect("no-port"): ${wool.statusName(status)}: ${message}`);
    if (status !== WOOL_STATUS_INVALID_ARGUMENT || message.length === 0) {
        throw new Error(`want WOOL_STATUS_INVALID_ARGUMENT with a message, got ${describe(status)}`);
    }
}

try {
    main();
} catch (err) {
    console.error(`poll_then_retire: ${err.message}`);
    process.exit(1);
}
