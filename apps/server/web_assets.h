// The dashboard page's files (web/*), embedded into the binary at build time.
//
// Why embedded: `gpu-accel serve` is one file to copy to a GPU box; a page read from disk at run
// time would break as soon as the binary moves. web_assets.cmake turns every file under web/ into a
// byte array of a generated .cpp (build/apps/generated/web_assets_data.cpp), so editing a page
// file rebuilds only that one translation unit.
#pragma once

#include <cstddef>
#include <string_view>

namespace ga::server {

struct WebAsset {
  const char* path;            // relative to web/, '/'-separated: "index.html", "app.js"
  const unsigned char* data;   // the file's bytes (followed by a NUL that size excludes)
  size_t size;
};

// Every embedded file, sorted by path.
extern const WebAsset kWebAssets[];
extern const size_t kWebAssetCount;

inline std::string_view asset_bytes(const WebAsset& asset) {
  return {reinterpret_cast<const char*>(asset.data), asset.size};
}

}  // namespace ga::server
