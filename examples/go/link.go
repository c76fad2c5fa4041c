//go:build !woolstatic

package wool

// Dynamic linking against the repository's debug build (see the package documentation for
// CGO_LDFLAGS and the woolstatic build tag).

// #cgo CFLAGS: -I${SRCDIR}/../../include
// #cgo LDFLAGS: -L${SRCDIR}/../../target/debug -Wl,-rpath,${SRCDIR}/../../target/debug -lwool
import "C"
