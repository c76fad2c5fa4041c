//go:build !woolpkgconfig && !woolstatic && !(linux && (amd64 || arm64))

package wool

// The module carries prebuilt libwool for linux/amd64 and linux/arm64 only. Anywhere else the
// default build stops here, at compile time, with an error that names the supported platforms
// and the way out, instead of failing later in the C compiler or the linker: install libwool
// (its C archive, or scripts/install.sh from a checkout) where pkg-config finds it as "wool"
// and build with -tags woolpkgconfig (or woolstatic).
var _ = libwool_prebuilt_only_for_linux_amd64_and_linux_arm64__elsewhere_install_libwool_and_build_with_tag_woolpkgconfig
