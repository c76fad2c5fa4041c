//! Network namespaces made by a test, joined by a veth pair, with addresses that exist only
//! inside them (10.77.x.0/30): for cut links and multicast that must never leave this machine.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Two network namespaces joined by a veth pair: the client's (10.77.x.1) and the worker's
/// (10.77.x.2). Removed on drop.
pub struct Link {
    pub client_ns: String,
    pub worker_ns: String,
    pub worker_if: String,
    pub worker_ip: String,
}

pub fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {args:?}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

impl Link {
    /// Makes the namespaces, or says why it cannot (not root, no `ip`, no namespaces).
    pub fn make(tag: &str) -> Result<Self, String> {
        let id = format!("{}{tag}", std::process::id() % 100_000);
        let subnet = 1 + (std::process::id() % 200) + if tag == "w" { 0 } else { 50 };
        let link = Link {
            client_ns: format!("woolc{id}"),
            worker_ns: format!("woolw{id}"),
            worker_if: format!("vw{id}"),
            worker_ip: format!("10.77.{subnet}.2"),
        };
        let client_if = format!("vc{id}");
        ip(&["netns", "add", &link.client_ns])?;
        ip(&["netns", "add", &link.worker_ns])?;
        let client_ip = format!("10.77.{subnet}.1/30");
        let worker_cidr = format!("{}/30", link.worker_ip);
        let (c, w) = (link.client_ns.as_str(), link.worker_ns.as_str());
        ip(&[
            "link",
            "add",
            &client_if,
            "netns",
            c,
            "type",
            "veth",
            "peer",
            "name",
            &link.worker_if,
            "netns",
            w,
        ])?;
        ip(&["-n", c, "addr", "add", &client_ip, "dev", &client_if])?;
        ip(&["-n", w, "addr", "add", &worker_cidr, "dev", &link.worker_if])?;
        for (ns, dev) in [
            (c, client_if.as_str()),
            (w, link.worker_if.as_str()),
            (c, "lo"),
            (w, "lo"),
        ] {
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        Ok(link)
    }

    /// Cuts the path: the worker's end goes down, and packets vanish without RST or FIN.
    pub fn cut(&self) {
        ip(&[
            "-n",
            &self.worker_ns,
            "link",
            "set",
            &self.worker_if,
            "down",
        ])
        .unwrap();
    }

    /// Runs `body` on a new thread that has entered namespace `ns` (sockets it makes live
    /// there), on a current-thread runtime of that thread.
    pub fn run_in<T: Send + 'static>(
        ns: &str,
        body: impl std::future::Future<Output = T> + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let path = PathBuf::from("/var/run/netns").join(ns);
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).unwrap();
            use std::os::fd::AsRawFd;
            // SAFETY: setns on this thread only, with a namespace file we opened.
            assert_eq!(
                unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) },
                0
            );
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(body)
        })
    }

    /// Starts `wool-worker` inside the worker namespace, listening on every address there.
    pub fn spawn_worker(&self, args: &[&str]) -> (NamespacedWorker, u16) {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.worker_ns])
            .arg(super::wool_worker_bin())
            .args(["--listen", "0.0.0.0:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        (NamespacedWorker(child), super::port_of(line.trim()))
    }
}

/// A worker process in a namespace, killed on drop (`ip netns exec` execs it: same process).
pub struct NamespacedWorker(pub std::process::Child);

impl Drop for NamespacedWorker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.client_ns]);
        let _ = ip(&["netns", "del", &self.worker_ns]);
    }
}

/// The link for a test, or `None` (with the reason printed) where namespaces cannot be made
/// (not root, no `ip`). With `WOOL_TEST_REQUIRE_NETNS=1` (the test command sets it on CI) a
/// link that cannot be made fails the test instead: a suite that needs namespaces never passes
/// silently without them.
pub fn link_or_skip(tag: &str) -> Option<Link> {
    match Link::make(tag) {
        Ok(link) => Some(link),
        Err(why) if std::env::var_os("WOOL_TEST_REQUIRE_NETNS").is_some_and(|v| v == "1") => {
            panic!("cannot make network namespaces here ({why}), and WOOL_TEST_REQUIRE_NETNS=1")
        }
        Err(why) => {
            eprintln!("SKIPPED: cannot make network namespaces here ({why})");
            None
        }
    }
}
