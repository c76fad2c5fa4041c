/*
 * PollThenRetire: Java 17 polls a Wool worker's idle time and retires it, by dlopen-ing the
 * released libwool.so through JNA (net.java.dev.jna:jna from Maven Central, pinned in pom.xml).
 * No binding package: the C functions used are declared below from include/wool.h, and every
 * decision (target parsing, gRPC, error kinds) stays in the library. (Java 17's foreign-memory
 * API is still incubating; it is final from Java 22.)
 *
 *   mvn dependency:copy-dependencies -DoutputDirectory=lib
 *   javac -cp lib/jna-5.19.1.jar -d classes src/main/java/io/libwool/example/PollThenRetire.java
 *   LIBWOOL_PATH=/opt/libwool/lib/libwool.so \
 *       java -cp classes:lib/jna-5.19.1.jar io.libwool.example.PollThenRetire 127.0.0.1:50051
 *
 * LIBWOOL_PATH (or the second argument) names the libwool.so to load, e.g. lib/libwool.so out
 * of the unpacked C archive libwool-<version>-<arch>-linux-gnu.tar.gz.
 *
 * It prints the library's version, connects, polls the worker's idle seconds (5 s deadline),
 * stops it (grace 0: it is idle; 10 s deadline), frees the handle, and then shows a failure:
 * connecting to a target without a port gives WOOL_STATUS_INVALID_ARGUMENT, and
 * wool_last_error gives its message. Exits 0 when all of that went as described, 1 otherwise
 * (printing the status name, the gRPC code and the library's message).
 */
package io.libwool.example;

import com.sun.jna.Library;
import com.sun.jna.Native;
import com.sun.jna.Pointer;
import com.sun.jna.ptr.DoubleByReference;
import com.sun.jna.ptr.PointerByReference;
import java.nio.charset.StandardCharsets;
import java.util.Map;

public final class PollThenRetire {
    /** wool_status is a C enum (an int): WOOL_STATUS_OK is 0, WOOL_STATUS_INVALID_ARGUMENT 1. */
    static final int WOOL_STATUS_OK = 0;

    static final int WOOL_STATUS_INVALID_ARGUMENT = 1;

    /**
     * The part of wool.h used here. Handles (wool_connection *) are plain Pointers. size_t is
     * mapped to long: 64 bits on the LP64 Linux targets libwool is released for.
     */
    public interface Wool extends Library {
        String wool_version();

        int wool_connect(String target, Pointer credentials, PointerByReference out);

        int wool_idle(Pointer conn, double timeoutSeconds, DoubleByReference outSeconds);

        int wool_stop(Pointer conn, double graceSeconds, double timeoutSeconds);

        void wool_free(Pointer conn);

        long wool_last_error(byte[] buf, long len);

        int wool_last_rpc_code();

        String wool_status_name(int status);
    }

    private final Wool wool;

    private PollThenRetire(Wool wool) {
        this.wool = wool;
    }

    /**
     * The message of this thread's most recent failure: the library keeps it per thread, and
     * JNA calls the library on the calling Java thread. The first call asks for the length.
     */
    String lastError() {
        int len = (int) wool.wool_last_error(null, 0);
        byte[] buf = new byte[len + 1];
        wool.wool_last_error(buf, buf.length);
        return new String(buf, 0, len, StandardCharsets.UTF_8);
    }

    String describe(int status) {
        return wool.wool_status_name(status) + " (gRPC " + wool.wool_last_rpc_code() + "): " + lastError();
    }

    void check(String what, int status) {
        if (status != WOOL_STATUS_OK) {
            throw new IllegalStateException(what + ": " + describe(status));
        }
    }

    void run(String address, String libPath) {
        System.out.println("libwool " + wool.wool_version() + " loaded from " + libPath);

        PointerByReference out = new PointerByReference();
        check("wool_connect(" + address + ")", wool.wool_connect(address, null, out));
        Pointer conn = out.getValue();
        try {
            DoubleByReference idle = new DoubleByReference();
            check("wool_idle", wool.wool_idle(conn, 5.0, idle));
            System.out.printf("idle %.3f s%n", idle.getValue());
            if (!(idle.getValue() >= 0)) {
                throw new IllegalStateException("wool_idle gave " + idle.getValue() + " seconds");
            }
            check("wool_stop", wool.wool_stop(conn, 0.0, 10.0));
            System.out.println("stopped: the worker drained and answered the stop");
        } finally {
            wool.wool_free(conn);
        }

        // A failure: the library refuses a target without a port and says why.
        int status = wool.wool_connect("no-port", null, new PointerByReference());
        String message = lastError();
        System.out.println("wool_connect(\"no-port\"): " + wool.wool_status_name(status) + ": " + message);
        if (status != WOOL_STATUS_INVALID_ARGUMENT || message.isEmpty()) {
            throw new IllegalStateException(
                    "want WOOL_STATUS_INVALID_ARGUMENT with a message, got " + describe(status));
        }
    }

    public static void main(String[] args) {
        String libPath = args.length > 1 ? args[1] : System.getenv("LIBWOOL_PATH");
        if (args.length < 1 || libPath == null || libPath.isEmpty()) {
            System.err.println("usage: LIBWOOL_PATH=/path/to/libwool.so java io.libwool.example.PollThenRetire ADDRESS");
            System.exit(2);
        }
        try {
            // An absolute path is loaded as it is (dlopen), with strings passed as UTF-8.
            Wool wool = Native.load(libPath, Wool.class,
                    Map.of(Library.OPTION_STRING_ENCODING, StandardCharsets.UTF_8.name()));
            new PollThenRetire(wool).run(args[0], libPath);
        } catch (RuntimeException | UnsatisfiedLinkError e) {
            System.err.println("PollThenRetire: " + e.getMessage());
            System.exit(1);
        }
    }
}
