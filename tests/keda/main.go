// keda-client drives a KEDA external scaler the way KEDA does, through KEDA's own generated
// client (github.com/kedacore/keda/v2/pkg/scalers/externalscaler) over grpc-go. The tests in
// tests/integration/scaler.rs run it against wool-scaler.
//
//	keda-client poll   --address HOST:PORT [--name N] [--namespace NS] [TLS] --meta k=v ...
//	keda-client stream --address HOST:PORT [--name N] [--namespace NS] [TLS] --meta k=v ...
//
// TLS (as a trigger with enableTLS: KEDA's caCert, tlsClientCert, tlsClientKey): --ca PEM
// verifies the scaler's certificate, --cert and --key present a client certificate.
//
// poll makes the calls of one KEDA polling cycle for an `external` trigger (GetMetricSpec, then
// GetMetrics for the spec's metric, then IsActive, as KEDA's GetMetricsAndActivity does) and
// prints one JSON object: the metric specs, the values, the activity. A failed call prints
// {"error": {"code": "...", "message": "..."}} and exits 1.
//
// stream opens StreamIsActive (the `external-push` trigger) and prints one JSON line per
// answer, {"active": bool, "ms": milliseconds since the stream opened}, until the stream ends
// ({"end": "EOF"} or {"end": code, "message": ...}) or the process is killed.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

type metaFlags map[string]string

func (m metaFlags) String() string { return fmt.Sprint(map[string]string(m)) }
func (m metaFlags) Set(text string) error {
	key, value, ok := strings.Cut(text, "=")
	if !ok {
		return fmt.Errorf("--meta wants key=value, got %q", text)
	}
	m[key] = value
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: keda-client poll|stream --address HOST:PORT --meta k=v ...")
		os.Exit(2)
	}
	mode := os.Args[1]
	flags := flag.NewFlagSet(mode, flag.ExitOnError)
	address := flags.String("address", "", "the scaler's address (scalerAddress)")
	name := flags.String("name", "workers", "the ScaledObject's name")
	namespace := flags.String("namespace", "default", "the ScaledObject's namespace")
	timeout := flags.Duration("timeout", 30*time.Second, "deadline of each poll call")
	caPath := flags.String("ca", "", "CA certificate (PEM) to verify the scaler with: TLS on")
	certPath := flags.String("cert", "", "client certificate (PEM), with --key: mutual TLS")
	keyPath := flags.String("key", "", "client key (PEM)")
	meta := metaFlags{}
	flags.Var(meta, "meta", "a scalerMetadata entry, key=value (repeatable)")
	_ = flags.Parse(os.Args[2:])
	// As KEDA passes it: the trigger's metadata, scalerAddress included.
	meta["scalerAddress"] = *address

	transport := insecure.NewCredentials()
	if *caPath != "" {
		config, err := tlsConfig(*caPath, *certPath, *keyPath)
		if err != nil {
			fail(err)
		}
		transport = credentials.NewTLS(config)
	}
	conn, err := grpc.NewClient(*address, grpc.WithTransportCredentials(transport))
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	client := pb.NewExternalScalerClient(conn)
	ref := &pb.ScaledObjectRef{Name: *name, Namespace: *namespace, ScalerMetadata: meta}

	switch mode {
	case "poll":
		poll(client, ref, *timeout)
	case "stream":
		stream(client, ref)
	default:
		fmt.Fprintf(os.Stderr, "unknown mode %q\n", mode)
		os.Exit(2)
	}
}

// tlsConfig is what KEDA's external scaler builds from caCert, tlsClientCert and tlsClientKey.
func tlsConfig(caPath, certPath, keyPath string) (*tls.Config, error) {
	pem, err := os.ReadFile(caPath)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no certificate", caPath)
	}
	config := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if certPath != "" {
		pair, err := tls.LoadX509KeyPair(certPath, keyPath)
		if err != nil {
			return nil, err
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return config, nil
}

func poll(client pb.ExternalScalerClient, ref *pb.ScaledObjectRef, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	spec, err := client.GetMetricSpec(ctx, ref)
	if err != nil {
		fail(err)
	}
	// Every field printed, zeros included (proto3's JSON would leave a zero out).
	specs := []map[string]any{}
	values := []map[string]any{}
	for _, s := range spec.MetricSpecs {
		specs = append(specs, map[string]any{
			"metricName": s.MetricName, "targetSize": s.TargetSize, "targetSizeFloat": s.TargetSizeFloat,
		})
		metrics, err := client.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: ref, MetricName: s.MetricName})
		if err != nil {
			fail(err)
		}
		for _, v := range metrics.MetricValues {
			values = append(values, map[string]any{
				"metricName": v.MetricName, "metricValue": v.MetricValue, "metricValueFloat": v.MetricValueFloat,
			})
		}
	}
	out := map[string]any{"specs": specs, "values": values}
	active, err := client.IsActive(ctx, ref)
	if err != nil {
		fail(err)
	}
	out["active"] = active.Result
	emit(out)
}

func stream(client pb.ExternalScalerClient, ref *pb.ScaledObjectRef) {
	started := time.Now()
	answers, err := client.StreamIsActive(context.Background(), ref)
	if err != nil {
		fail(err)
	}
	for {
		answer, err := answers.Recv()
		if errors.Is(err, io.EOF) {
			emit(map[string]any{"end": "EOF"})
			return
		}
		if err != nil {
			s := status.Convert(err)
			emit(map[string]any{"end": s.Code().String(), "message": s.Message()})
			os.Exit(1)
		}
		emit(map[string]any{"active": answer.Result, "ms": time.Since(started).Milliseconds()})
	}
}

func emit(v any) {
	line, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(line))
}

func fail(err error) {
	s := status.Convert(err)
	emit(map[string]any{"error": map[string]string{"code": s.Code().String(), "message": s.Message()}})
	os.Exit(1)
}
