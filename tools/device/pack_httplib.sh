#!/usr/bin/env bash
# Packs this machine's Debian cpp-httplib (package libcpp-httplib-dev) into a folder that can be carried to
# the device machine, which has no cpp-httplib and no network: tools/device/serve.sh builds
# `gpu-accel serve` against it there.
#
# Why a folder of Debian's files instead of building cpp-httplib from source: the project uses Debian's
# library (apps/CMakeLists.txt finds it through pkg-config), and the device has no source of it. Debian's
# libcpp-httplib.so is linked to OpenSSL 3, zlib and brotli. OpenSSL 3 (libssl.so.3, with its headers) and
# zlib (libz.so.1) are on the device; brotli's decoder/encoder may not be, so the three brotli libraries
# travel too, with the headers httplib.h includes (brotli/, zlib.h). The binaries need GLIBC <= 2.34 and
# GLIBCXX <= 3.4.30 (Debian 12); the device (Ubuntu 24.04) has newer ones, so they load there.
#
# The pkg-config file locates itself (${pcfiledir}), so the folder works wherever it is copied. It names no
# other .pc file (Debian's says Requires.private: openssl zlib libbrotli*, which pkg-config resolves even
# for --cflags and the device may lack): the -D flags that select httplib's features (they change its class
# layouts, so they must match the library) are in Cflags, and Libs carries an rpath to the folder, so the
# linker finds the brotli libraries that libcpp-httplib.so needs and the binary finds them when it runs.
# pkgconf (binary + libpkgconf) travels as well, for a device without pkg-config.
#
# Usage: tools/device/pack_httplib.sh DEST   (e.g. .httplib beside the repository copy; DEST is replaced)
set -euo pipefail
dest=${1:?usage: pack_httplib.sh DEST}
lib=/usr/lib/x86_64-linux-gnu
[[ -f /usr/include/httplib.h && -f $lib/libcpp-httplib.so ]] || { echo "cpp-httplib not installed" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest/include" "$dest/lib/pkgconfig" "$dest/bin"
cp /usr/include/httplib.h /usr/include/zlib.h /usr/include/zconf.h "$dest/include/"
cp -r /usr/include/brotli "$dest/include/"
# The real files and their soname / development links (cp -P keeps the links as links).
cp -P $lib/libcpp-httplib.so* $lib/libbrotlicommon.so* $lib/libbrotlidec.so* $lib/libbrotlienc.so* "$dest/lib/"
cp -P $lib/libpkgconf.so.3* "$dest/lib/"
cp /usr/bin/pkgconf "$dest/bin/pkgconf"
# pkg-config for a device without one: the carried pkgconf with its library.
cat > "$dest/bin/pkg-config" <<'EOF'
#!/bin/sh
here=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH="$here/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/pkgconf" "$@"
EOF
chmod +x "$dest/bin/pkg-config"
version=$(sed -n 's/^Version: *//p' $lib/pkgconfig/cpp-httplib.pc)
cflags=$(sed -n 's/^Cflags: *//p' $lib/pkgconfig/cpp-httplib.pc | tr ' ' '\n' | grep '^-D' | tr '\n' ' ')
cat > "$dest/lib/pkgconfig/cpp-httplib.pc" <<EOF
# Debian's cpp-httplib $version, carried (tools/device/pack_httplib.sh): relocatable, no Requires.
prefix=\${pcfiledir}/../..
includedir=\${prefix}/include
libdir=\${prefix}/lib

Name: cpp-httplib
Description: A C++ HTTP/HTTPS server and client library (Debian's build, carried)
Version: $version
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lcpp-httplib
Libs.private: -pthread
Cflags: -I\${includedir} ${cflags% }
EOF
du -sh "$dest"
