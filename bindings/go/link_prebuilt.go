//go:build !woolpkgconfig && !woolstatic

package wool

// The default build: the header of the released module, include/wool.h (a copy of the
// repository's include/wool.h, put there by scripts/release-go.sh), on every platform, so that
// the C side compiles wherever cgo runs and an unsupported platform fails in Go, at
// link_unsupported.go, with a message. The libraries are linked by link_prebuilt_linux_*.go.

// #cgo CFLAGS: -I${SRCDIR}/include
import "C"
