//! Demand input: Wool clients report tasks waiting for a worker to `libwool.scaler.v1.Demand`
//! on the scaler's address, and KEDA's calls count them. Each test serves a real scaler
//! (`libwool::scaler::Scaler`, or the `wool-scaler` binary for its flags) on a real socket and
//! drives it with tonic clients: the demand client and KEDA's `ExternalScaler` client, in
//! plaintext, mutual TLS and one-way TLS. The fleets are empty discovery namespaces: zero
//! workers, where only demand can make a ScaledObject active.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use libwool::protocol::externalscaler::external_scaler_client::ExternalScalerClient;
use libwool::protocol::externalscaler::{GetMetricsRequest, ScaledObjectRef};
use libwool::scaler::demand::wire::demand_client::DemandClient;
use libwool::scaler::demand::wire::{DemandAck, DemandReport, ScaledObject};
use libwool::scaler::{DemandOptions, Scaler, ScalerHandle};
use libwool::server::ServerCredentialFiles;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic::Code;

/// How long anything here may take to be seen: generous, for a busy machine; the waits end as
/// soon as what they wait for is there.
const LIMIT: Duration = Duration::from_secs(30);

/// A short TTL, so that expiry is seen within a test.
const SHORT_TTL: Duration = Duration::from_secs(2);

/// A ScaledObject in `default` named `name`, whose fleet is the empty discovery namespace
/// `fleet` (zero workers); `maxSweepAge: 1h`, so that a stream sweeps once and any later
/// answer comes from demand.
fn reference(name: &str, fleet: &str) -> ScaledObjectRef {
    ScaledObjectRef {
        name: name.into(),
        namespace: "default".into(),
        scaler_metadata: [("namespace", fleet), ("maxSweepAge", "1h")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    }
}

fn report(namespace: &str, name: &str, client: &str, waiting: u32) -> DemandReport {
    DemandReport {
        scaled_object: Some(ScaledObject {
            name: name.into(),
            namespace: namespace.into(),
        }),
        client_id: client.into(),
        waiting,
    }
}

async fn serve(options: DemandOptions) -> ScalerHandle {
    Scaler::builder()
        .listen("127.0.0.1:0")
        .demand(options)
        .serve()
        .await
        .expect("the scaler serves")
}

fn short_ttl() -> DemandOptions {
    DemandOptions {
        ttl: SHORT_TTL,
        ..DemandOptions::default()
    }
}

async fn plaintext(scaler: &ScalerHandle) -> Channel {
    Channel::from_shared(format!("http://{}", scaler.address()))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

async fn send(channel: &Channel, report: DemandReport) -> Result<DemandAck, tonic::Status> {
    DemandClient::new(channel.clone())
        .report(report)
        .await
        .map(tonic::Response::into_inner)
}

async fn is_active(channel: &Channel, reference: &ScaledObjectRef) -> bool {
    ExternalScalerClient::new(channel.clone())
        .is_active(reference.clone())
        .await
        .unwrap()
        .into_inner()
        .result
}

async fn metric(channel: &Channel, reference: &ScaledObjectRef) -> f64 {
    ExternalScalerClient::new(channel.clone())
        .get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(reference.clone()),
            metric_name: libwool::scaler::METRIC_NAME.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .metric_values[0]
        .metric_value_float
}

/// Asks IsActive until it answers `want`, within [`LIMIT`]; returns how long that took.
async fn active_becomes(channel: &Channel, reference: &ScaledObjectRef, want: bool) -> Duration {
    let started = Instant::now();
    while is_active(channel, reference).await != want {
        assert!(
            started.elapsed() < LIMIT,
            "IsActive never became {want} within {LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed()
}

/// The next answer of a StreamIsActive stream, within [`LIMIT`].
async fn next_answer(
    stream: &mut tonic::Streaming<libwool::protocol::externalscaler::IsActiveResponse>,
) -> bool {
    tokio::time::timeout(LIMIT, stream.message())
        .await
        .unwrap_or_else(|_| panic!("StreamIsActive said nothing within {LIMIT:?}"))
        .expect("the stream goes on")
        .expect("the stream goes on")
        .result
}

/// Given a ScaledObject whose fleet has no workers, when two clients report 3 and 2 waiting
/// tasks, then IsActive is true and the metric is 5 (busy 0 + waiting 5), while another
/// ScaledObject naming the same fleet stays inactive at 0 (demand is per ScaledObject); a
/// report replaces its client's figure, a withdrawal (0) takes it away, and the metrics say
/// what is waiting and how many clients wait.
#[test]
fn demand_from_zero_makes_a_scaled_object_active_and_counts_in_its_metric() {
    let runtime = common::runtime();
    runtime.block_on(async {
        let scaler = serve(DemandOptions::default()).await;
        let channel = plaintext(&scaler).await;
        let fleet = common::unique_namespace("demand");
        let (ours, theirs) = (reference("ours", &fleet), reference("theirs", &fleet));
        assert!(!is_active(&channel, &ours).await);
        assert_eq!(metric(&channel, &ours).await, 0.0);

        let ack = send(&channel, report("default", "ours", "client-a", 3))
            .await
            .unwrap();
        assert_eq!(ack.ttl_seconds, 30.0);
        assert_eq!(ack.report_interval_seconds, 10.0);
        assert_eq!((ack.reports_per_second, ack.max_waiting), (10, 100_000));
        send(&channel, report("default", "ours", "client-b", 2))
            .await
            .unwrap();
        assert!(is_active(&channel, &ours).await);
        assert_eq!(metric(&channel, &ours).await, 5.0);
        assert!(!is_active(&channel, &theirs).await);
        assert_eq!(metric(&channel, &theirs).await, 0.0);

        send(&channel, report("default", "ours", "client-a", 1))
            .await
            .unwrap();
        assert_eq!(metric(&channel, &ours).await, 3.0);
        send(&channel, report("default", "ours", "client-b", 0))
            .await
            .unwrap();
        assert_eq!(metric(&channel, &ours).await, 1.0);
        let metrics = common::samples(&scaler.metrics_text());
        assert_eq!(
            metrics[r#"wool_scaler_demand_waiting{scaledobject="default/ours"}"#],
            1.0
        );
        assert_eq!(metrics["wool_scaler_demand_clients"], 1.0);
        assert_eq!(
            metrics[r#"wool_scaler_demand_reports_total{outcome="accepted"}"#],
            4.0
        );
        let busy = metrics
            .iter()
            .find(|(k, _)| k.starts_with(r#"wool_scaler_busy_workers{scaledobject="default/ours""#))
            .map(|(_, v)| *v);
        assert_eq!(busy, Some(1.0), "{metrics:?}");

        send(&channel, report("default", "ours", "client-a", 0))
            .await
            .unwrap();
        assert!(!is_active(&channel, &ours).await);
        let metrics = common::samples(&scaler.metrics_text());
        assert!(!metrics
            .keys()
            .any(|k| k.starts_with("wool_scaler_demand_waiting{")));
    });
}

/// Given a StreamIsActive stream of a ScaledObject with no workers (`maxSweepAge: 1h`: no sweep
/// after its first), when demand is reported, then the stream says true at once (woken by the
/// demand, not by a sweep); when the figure is not renewed, it says false once the TTL has
/// passed; reported again then withdrawn, it says true then false (the withdrawal, not the
/// TTL, ending it).
#[test]
fn a_stream_sees_demand_at_once_and_its_expiry_and_withdrawal() {
    let runtime = common::runtime();
    runtime.block_on(async {
        let scaler = serve(short_ttl()).await;
        let channel = plaintext(&scaler).await;
        let fleet = common::unique_namespace("demand");
        let ours = reference("streamed", &fleet);
        let mut stream = ExternalScalerClient::new(channel.clone())
            .stream_is_active(ours.clone())
            .await
            .unwrap()
            .into_inner();
        assert!(!next_answer(&mut stream).await);

        let reported = Instant::now();
        send(&channel, report("default", "streamed", "client", 1))
            .await
            .unwrap();
        assert!(next_answer(&mut stream).await);
        eprintln!("demand seen by the stream after {:?}", reported.elapsed());
        assert!(!next_answer(&mut stream).await);
        let expired = reported.elapsed();
        eprintln!("expiry seen by the stream after {expired:?} (TTL {SHORT_TTL:?})");
        assert!(expired >= SHORT_TTL, "{expired:?}");
        assert_eq!(
            common::samples(&scaler.metrics_text())["wool_scaler_demand_expired_total"],
            1.0
        );

        send(&channel, report("default", "streamed", "client", 4))
            .await
            .unwrap();
        assert!(next_answer(&mut stream).await);
        send(&channel, report("default", "streamed", "client", 0))
            .await
            .unwrap();
        assert!(!next_answer(&mut stream).await);
        // Ended by the withdrawal, not by the TTL.
        assert_eq!(
            common::samples(&scaler.metrics_text())["wool_scaler_demand_expired_total"],
            1.0
        );
    });
}

/// Given a scaler with a short TTL, when a client reports and then stops reporting, then
/// IsActive turns false once the TTL has passed (and not before), as KEDA's polling sees it.
#[test]
fn demand_not_renewed_expires_after_the_ttl() {
    let runtime = common::runtime();
    runtime.block_on(async {
        let scaler = serve(short_ttl()).await;
        let channel = plaintext(&scaler).await;
        let fleet = common::unique_namespace("demand");
        let ours = reference("expiring", &fleet);
        let reported = Instant::now();
        send(&channel, report("default", "expiring", "client", 2))
            .await
            .unwrap();
        assert!(is_active(&channel, &ours).await);
        active_becomes(&channel, &ours, false).await;
        assert!(reported.elapsed() >= SHORT_TTL, "{:?}", reported.elapsed());
        assert_eq!(metric(&channel, &ours).await, 0.0);
    });
}

/// Given a ScaledObject whose fleet cannot be listed (a DNS name that does not resolve, as a
/// headless Service without pods may not), when a client reports demand, then IsActive is true
/// (demand is what should start a pod) and a stream says true, while GetMetrics still fails
/// UNAVAILABLE (KEDA keeps the count rather than scale on half a figure); once the demand is
/// withdrawn, IsActive is UNAVAILABLE again and the stream ends with that status.
#[test]
fn a_fleet_that_cannot_be_listed_is_active_on_demand_while_its_metric_still_fails() {
    let runtime = common::runtime();
    runtime.block_on(async {
        let scaler = serve(DemandOptions::default()).await;
        let channel = plaintext(&scaler).await;
        let unlisted = ScaledObjectRef {
            name: "unlisted".into(),
            namespace: "default".into(),
            scaler_metadata: [
                ("dnsName", "nosuchhost.invalid."),
                ("port", "50051"),
                ("maxSweepAge", "1s"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        };
        let mut client = ExternalScalerClient::new(channel.clone());
        let status = client.is_active(unlisted.clone()).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");

        send(&channel, report("default", "unlisted", "client", 2))
            .await
            .unwrap();
        assert!(is_active(&channel, &unlisted).await);
        let status = client
            .get_metrics(GetMetricsRequest {
                scaled_object_ref: Some(unlisted.clone()),
                metric_name: libwool::scaler::METRIC_NAME.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        let mut stream = client
            .stream_is_active(unlisted.clone())
            .await
            .unwrap()
            .into_inner();
        assert!(next_answer(&mut stream).await);

        send(&channel, report("default", "unlisted", "client", 0))
            .await
            .unwrap();
        let ended = tokio::time::timeout(LIMIT, stream.message())
            .await
            .expect("the stream ends within the limit");
        let status = ended.expect_err("the stream ends with the listing's status");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        let status = client.is_active(unlisted.clone()).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    });
}

/// Given a scaler with small bounds (2 ScaledObjects with demand, 2 clients each, at most 10
/// waiting, 3 reports a second), then each bound exceeded is refused with its status and a
/// message naming it: names too long or badly spelled, a client id too long or empty, too many
/// waiting (INVALID_ARGUMENT), a third ScaledObject, a third client, a client reporting too
/// often (RESOURCE_EXHAUSTED), a report larger than 1 KiB (OUT_OF_RANGE); and nothing else is
/// lost: the demand accepted before still counts, and the refusals are counted by reason.
#[test]
fn each_bound_exceeded_is_refused_with_its_status_and_nothing_else_lost() {
    let runtime = common::runtime();
    runtime.block_on(async {
        let scaler = serve(DemandOptions {
            max_scaled_objects: 2,
            max_clients_per_scaled_object: 2,
            max_waiting: 10,
            reports_per_second: 3,
            ..DemandOptions::default()
        })
        .await;
        let channel = plaintext(&scaler).await;
        let fleet = common::unique_namespace("demand");
        send(&channel, report("default", "a", "c1", 4))
            .await
            .unwrap();
        send(&channel, report("default", "a", "c2", 5))
            .await
            .unwrap();
        send(&channel, report("default", "b", "c1", 1))
            .await
            .unwrap();

        let long_name = "n".repeat(254);
        let long_namespace = "s".repeat(64);
        let long_client = "c".repeat(129);
        for (case, bad, code, says) in [
            (
                "a name of 254 bytes",
                report("default", &long_name, "c1", 1),
                Code::InvalidArgument,
                "254 bytes long, more than 253",
            ),
            (
                "a namespace of 64 bytes",
                report(&long_namespace, "a", "c1", 1),
                Code::InvalidArgument,
                "64 bytes long, more than 63",
            ),
            (
                "a name no Kubernetes object has",
                report("default", "Not_A_Name", "c1", 1),
                Code::InvalidArgument,
                "not a Kubernetes name",
            ),
            (
                "a client id of 129 bytes",
                report("default", "a", &long_client, 1),
                Code::InvalidArgument,
                "client id is 129 bytes long",
            ),
            (
                "an empty client id",
                report("default", "a", "", 1),
                Code::InvalidArgument,
                "client id is empty",
            ),
            (
                "11 waiting",
                report("default", "a", "c1", 11),
                Code::InvalidArgument,
                "--max-demand-waiting",
            ),
            (
                "a third ScaledObject",
                report("default", "c", "c1", 1),
                Code::ResourceExhausted,
                "--max-demand-scaled-objects",
            ),
            (
                "a third client",
                report("default", "a", "c3", 1),
                Code::ResourceExhausted,
                "--max-demand-clients-per-scaled-object",
            ),
            (
                "a report of 2 KiB",
                report("default", "a", &"x".repeat(2048), 1),
                Code::OutOfRange,
                "",
            ),
        ] {
            let status = send(&channel, bad).await.unwrap_err();
            assert_eq!(status.code(), code, "{case}: {status:?}");
            assert!(status.message().contains(says), "{case}: {status:?}");
        }
        DemandClient::new(channel.clone())
            .report(DemandReport {
                scaled_object: None,
                client_id: "c1".into(),
                waiting: 1,
            })
            .await
            .map(drop)
            .expect_err("a report naming no ScaledObject");

        // The rate: 3 at once, refilled at 3 a second; a client reporting as fast as it can
        // is refused within a few reports, and the refusal says which bound.
        let mut refused = None;
        for attempt in 0..100 {
            match send(&channel, report("default", "b", "c2", 1 + attempt % 2)).await {
                Ok(_) => {}
                Err(status) => {
                    refused = Some(status);
                    break;
                }
            }
        }
        let refused = refused.expect("100 reports as fast as possible, none refused");
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        assert!(
            refused.message().contains("--demand-reports-per-second"),
            "{refused:?}"
        );

        // Nothing else lost: the demand accepted before still counts.
        assert_eq!(metric(&channel, &reference("a", &fleet)).await, 9.0);
        let metrics = common::samples(&scaler.metrics_text());
        for (outcome, at_least) in [
            ("invalid_name", 6.0),
            ("too_many_waiting", 1.0),
            ("too_many_scaled_objects", 1.0),
            ("too_many_clients", 1.0),
            ("rate_limited", 1.0),
        ] {
            let key = format!("wool_scaler_demand_reports_total{{outcome=\"{outcome}\"}}");
            assert!(
                metrics.get(&key).copied().unwrap_or(0.0) >= at_least,
                "{key}: {metrics:?}"
            );
        }
    });
}

/// Given a scaler serving mutual TLS, then a demand client presenting a certificate of the
/// client CA reports and KEDA's client (over the same TLS) sees the ScaledObject active; one
/// without a certificate, or with one of another CA, is refused by the handshake and its
/// report counts for nothing. Given one-way TLS, then `Report` answers UNAUTHENTICATED.
#[test]
fn demand_under_tls_needs_a_verified_client_certificate() {
    let pki = common::Pki::generate();
    let runtime = common::runtime();
    runtime.block_on(async {
        let scaler = Scaler::builder()
            .listen("127.0.0.1:0")
            .credentials_from_files(ServerCredentialFiles {
                cert: pki.leaf.cert_path.clone(),
                key: pki.leaf.key_path.clone(),
                client_ca: Some(pki.ca_path.clone()),
            })
            .serve()
            .await
            .unwrap();
        let fleet = common::unique_namespace("demand");
        let ours = reference("secured", &fleet);
        let address = format!("https://{}", scaler.address());
        let tls = |leaf: Option<&common::Leaf>| {
            let config = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(&pki.ca_pem))
                .domain_name("localhost");
            match leaf {
                Some(leaf) => config.identity(Identity::from_pem(&leaf.cert_pem, &leaf.key_pem)),
                None => config,
            }
        };
        let connect = |config: ClientTlsConfig| {
            let address = address.clone();
            async move {
                Channel::from_shared(address)
                    .unwrap()
                    .tls_config(config)
                    .unwrap()
                    .connect()
                    .await
            }
        };
        let trusted = connect(tls(Some(&pki.leaf))).await.unwrap();

        for (case, config) in [
            ("no client certificate", tls(None)),
            ("a certificate of another CA", tls(Some(&pki.other_leaf))),
        ] {
            // Refused by the handshake: the client sees the scaler's alert or, when the
            // connection is closed first, only that; never an answer.
            let outcome = match connect(config).await {
                Err(error) => Err(format!("{error:?}")),
                Ok(channel) => send(&channel, report("default", "secured", case, 1))
                    .await
                    .map_err(|status| format!("{status:?}")),
            };
            let error = outcome.expect_err(case);
            eprintln!("{case}: refused: {error}");
        }
        assert!(!is_active(&trusted, &ours).await);

        send(&trusted, report("default", "secured", "trusted", 1))
            .await
            .unwrap();
        assert!(is_active(&trusted, &ours).await);
        assert_eq!(metric(&trusted, &ours).await, 1.0);

        let one_way = Scaler::builder()
            .listen("127.0.0.1:0")
            .credentials_from_files(ServerCredentialFiles {
                cert: pki.leaf.cert_path.clone(),
                key: pki.leaf.key_path.clone(),
                client_ca: None,
            })
            .serve()
            .await
            .unwrap();
        let channel = Channel::from_shared(format!("https://{}", one_way.address()))
            .unwrap()
            .tls_config(tls(Some(&pki.leaf)))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let status = send(&channel, report("default", "secured", "client", 1))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
        assert!(status.message().contains("mutual TLS"), "{status:?}");
        assert!(!is_active(&channel, &ours).await);
        let metrics = common::samples(&one_way.metrics_text());
        assert_eq!(
            metrics[r#"wool_scaler_demand_reports_total{outcome="unauthenticated"}"#],
            1.0
        );
    });
}

/// Given `wool-scaler` started with `--demand-ttl 2s --max-demand-waiting 5`, then a report
/// of 6 is refused naming the flag and the ack says the TTL and the bound; with `--no-demand`,
/// `Report` is UNIMPLEMENTED; a TTL out of range is a usage error (exit 2) naming it.
#[test]
fn wool_scaler_flags_set_the_demand_bounds_or_turn_demand_off() {
    let start = |args: &[&str]| {
        let mut child = Command::new(common::program("wool-scaler"))
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("wool-scaler starts");
        let address = common::printed_address(&mut child, "wool-scaler");
        (KillOnDrop(child), address)
    };
    let runtime = common::runtime();
    let (_scaler, address) = start(&["--demand-ttl", "2s", "--max-demand-waiting", "5"]);
    let (_off, off_address) = start(&["--no-demand"]);
    runtime.block_on(async {
        let connect = |address: String| async move {
            Channel::from_shared(format!("http://{address}"))
                .unwrap()
                .connect()
                .await
                .unwrap()
        };
        let channel = connect(address).await;
        let ack = send(&channel, report("default", "flags", "c", 5))
            .await
            .unwrap();
        assert_eq!((ack.ttl_seconds, ack.max_waiting), (2.0, 5));
        let status = send(&channel, report("default", "flags", "c", 6))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(
            status.message().contains("--max-demand-waiting"),
            "{status:?}"
        );

        let off = connect(off_address).await;
        let status = send(&off, report("default", "flags", "c", 1))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    });
    let output = Command::new(common::program("wool-scaler"))
        .args(["--listen", "127.0.0.1:0", "--demand-ttl", "0s"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--demand-ttl"), "{stderr}");
}

/// A child process, SIGKILLed and reaped on drop.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
