// The dashboard page's static files (index.html, dashboard.js, dashboard.css in this
// folder), embedded into the binary at build time by embed_assets.py: the page needs no
// files beside the binary and nothing from the network.
#pragma once

#include <cstddef>
#include <string_view>

namespace tandem::dashboard {

struct Asset {
  const char* path;          // the URL path: "/index.html", "/dashboard.js", ...
  const char* content_type;  // with its charset
  const unsigned char* data;
  size_t size;
};

// The asset served at `url_path` ("/" is "/index.html"), or nullptr.
const Asset* find_asset(std::string_view url_path);

}  // namespace tandem::dashboard
