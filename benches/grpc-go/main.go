// Command grpc-go-bench: the grpc-go anchor for scripts/bench.sh (see BENCHMARKS.md). Idle
// polls to wool-worker from plain grpc-go, with no libwool in the process: what a stock gRPC
// client costs on the same machine, against the same worker. Not a test: nothing here asserts
// on time.
//
//	grpc-go-bench seq ADDR N WARMUP          sequential polls, one at a time
//	grpc-go-bench burst ADDR LEVELS SECONDS  bursts of N concurrent polls (LEVELS like 256,10000)
//	grpc-go-bench first ADDR N WARMUP        N first polls, each on a NEW grpc.ClientConn (TCP
//	                                         connect, TLS handshake when TLS is on, HTTP/2
//	                                         preface and settings, the call), timed from
//	                                         grpc.NewClient to the answer
//
// Every poll of seq and burst is `/wool.runtime.protobuf.wire.Worker/idle` on ONE
// grpc.ClientConn (insecure credentials, or with WOOL_BENCH_TLS=DIR in the environment mutual
// TLS through credentials.NewTLS: trusting DIR/ca.pem, presenting DIR/client-cert.pem and
// DIR/client-key.pem, the files `wool_bench tls-certs DIR` writes; grpc-go's defaults
// otherwise: no keepalive, no retries configured), through a raw
// codec that passes []byte through: no protoc, no generated code. The request is the empty
// message `Void` (zero bytes); the response `Idle { double seconds = 1; }` is 0x09 followed by a
// little-endian f64 (or zero bytes when seconds is 0.0, proto3's default), decoded by hand.
//
// Output: one line of JSON on stdout, as benches/harness writes it (the keys of the Rust driver,
// benches/wool_bench.rs, which benches/run.py turns into statistics): seq as `seq-raw` and first
// as `first` (a harness.Latency), burst as `burst` (harness.Bursts). seq calls without a
// deadline, as the raw tonic stub (a) does; burst gives each call harness.BurstCallTimeout
// (60 s), as the Rust burst does.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/libwool/libwool/benches/harness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

const method = "/wool.runtime.protobuf.wire.Worker/idle"

// rawCodec passes []byte through unchanged. Named "proto" (the bytes are protobuf), so the
// content-type on the wire is application/grpc+proto, which any gRPC server accepts.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// decodeIdle reads `Idle { double seconds = 1; }`: field 1, wire type 1 (tag 0x09) and 8 bytes
// of little-endian f64; absent means 0.0. Other fields are skipped, as protobuf requires.
func decodeIdle(b []byte) (float64, error) {
	seconds := 0.0
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, errors.New("Idle: bad tag")
		}
		b = b[n:]
		switch tag & 7 {
		case 0: // varint
			_, n := binary.Uvarint(b)
			if n <= 0 {
				return 0, errors.New("Idle: bad varint")
			}
			b = b[n:]
		case 1: // fixed64
			if len(b) < 8 {
				return 0, errors.New("Idle: short fixed64")
			}
			if tag>>3 == 1 {
				seconds = math.Float64frombits(binary.LittleEndian.Uint64(b))
			}
			b = b[8:]
		case 2: // length-delimited
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return 0, errors.New("Idle: bad length")
			}
			b = b[n+int(l):]
		case 5: // fixed32
			if len(b) < 4 {
				return 0, errors.New("Idle: short fixed32")
			}
			b = b[4:]
		default:
			return 0, fmt.Errorf("Idle: wire type %d", tag&7)
		}
	}
	return seconds, nil
}

// idle makes one poll; resp is the caller's buffer, reused from call to call.
func idle(ctx context.Context, conn *grpc.ClientConn, resp *[]byte) (float64, error) {
	req := []byte{} // Void: zero bytes
	if err := conn.Invoke(ctx, method, &req, resp); err != nil {
		return 0, err
	}
	seconds, err := decodeIdle(*resp)
	if err == nil && !(seconds >= 0) { // negative or NaN
		err = fmt.Errorf("Idle: seconds = %v", seconds)
	}
	return seconds, err
}

// transportCredentials: mutual TLS from the directory in WOOL_BENCH_TLS, else insecure. Read
// once per process (the files are not re-read per connection).
var transportCredentials = sync.OnceValue(func() credentials.TransportCredentials {
	dir := os.Getenv("WOOL_BENCH_TLS")
	if dir == "" {
		return insecure.NewCredentials()
	}
	ca, err := os.ReadFile(dir + "/ca.pem")
	if err != nil {
		fail(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		fail(fmt.Errorf("%s/ca.pem: no certificate", dir))
	}
	cert, err := tls.LoadX509KeyPair(dir+"/client-cert.pem", dir+"/client-key.pem")
	if err != nil {
		fail(err)
	}
	return credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}})
})

func dial(addr string) *grpc.ClientConn {
	target := addr
	if !strings.Contains(addr, "://") {
		target = "passthrough:///" + addr
	}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(transportCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		fail(err)
	}
	return conn
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "grpc-go-bench:", err)
	os.Exit(1)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: grpc-go-bench seq|first ADDR N WARMUP | burst ADDR LEVELS SECONDS")
	os.Exit(2)
}

// emit prints v as the one line of JSON the runner reads.
func emit(v any) {
	if err := harness.Emit(os.Stdout, v); err != nil {
		fail(err)
	}
}

func main() {
	if len(os.Args) != 5 {
		usage()
	}
	switch os.Args[1] {
	case "seq", "first":
		n, warmup, err := harness.ParseCounts(os.Args[3], os.Args[4])
		if err != nil {
			usage()
		}
		if os.Args[1] == "first" {
			first(os.Args[2], n, warmup)
		} else {
			seq(os.Args[2], n, warmup)
		}
	case "burst":
		levels, err1 := harness.ParseLevels(os.Args[3])
		seconds, err2 := harness.ParseSeconds(os.Args[4])
		if err1 != nil || err2 != nil {
			usage()
		}
		burst(os.Args[2], levels, seconds)
	default:
		usage()
	}
}

func seq(addr string, n, warmup int) {
	conn := dial(addr)
	defer conn.Close()
	ctx := context.Background()
	resp := make([]byte, 0, 16)
	last := 0.0
	out, err := harness.Seq(n, warmup, func() error {
		seconds, err := idle(ctx, conn, &resp)
		last = seconds
		return err
	})
	if err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "grpc-go-bench: last Idle.seconds = %g (%d response bytes)\n", last, len(resp))
	emit(out)
}

// first: warmup + n first polls, each on a new grpc.ClientConn (its own TCP connection and
// handshakes), timed from grpc.NewClient to the answer; as `first` of the Rust driver, the
// connections stay open until the end, so that no closing overlaps a later sample.
func first(addr string, n, warmup int) {
	kept := make([]*grpc.ClientConn, 0, n+warmup)
	samples := make([]int64, 0, n)
	resp := make([]byte, 0, 16)
	var cpu float64
	var start time.Time
	for i := 0; i < warmup+n; i++ {
		if i == warmup {
			cpu, start = harness.ProcessCPU(), time.Now()
		}
		t := time.Now()
		conn := dial(addr)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := idle(ctx, conn, &resp)
		cancel()
		if err != nil {
			fail(err)
		}
		if i >= warmup {
			samples = append(samples, time.Since(t).Nanoseconds())
		}
		kept = append(kept, conn)
	}
	elapsed := time.Since(start).Seconds()
	cpu = harness.ProcessCPU() - cpu
	for _, conn := range kept {
		conn.Close()
	}
	emit(harness.Latency{SamplesNs: samples, ElapsedS: elapsed, CPUS: cpu})
}

// burst: for each level, bursts of `level` goroutines each making one poll on the one
// ClientConn, repeated until `seconds` have passed (at least one burst per level).
func burst(addr string, levels []int, seconds float64) {
	conn := dial(addr)
	defer conn.Close()
	{ // connect outside the measurement
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp := []byte{}
		_, err := idle(ctx, conn, &resp)
		cancel()
		if err != nil {
			fail(err)
		}
	}
	rows := harness.Burst(levels, seconds, func(ctx context.Context) error {
		resp := []byte{}
		_, err := idle(ctx, conn, &resp)
		return err
	})
	emit(harness.Bursts{Levels: rows})
}
