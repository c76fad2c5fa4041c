// Command etcd is etcd v3.6.13's server (go.etcd.io/etcd/server/v3/etcdmain), the store of the
// API server scripts/e2e-kubernetes.sh starts on loopback.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
