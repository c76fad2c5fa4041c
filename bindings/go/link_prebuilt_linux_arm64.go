//go:build !woolpkgconfig && !woolstatic

package wool

// The default build on linux/arm64: the prebuilt, stripped static libwool.a that the released
// module carries in lib/linux_arm64 (built for a glibc of 2.17 or newer by scripts/release.sh;
// the header is include/wool.h, see link_prebuilt.go). The archive is named by its path, so no
// other libwool installed on the system can stand in for it; the system libraries after it are
// those a Rust static library needs on Linux (rustc --print native-static-libs). The binary
// needs no libwool.so at run time. A checkout of the repository holds neither file
// (scripts/release-go.sh puts them into the module zip only): build there with -tags
// woolpkgconfig.

// #cgo LDFLAGS: ${SRCDIR}/lib/linux_arm64/libwool.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
import "C"
