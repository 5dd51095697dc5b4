// A grouped bar chart written as a PNG, for `kvferry bench --plot`. No
// dependencies: RGB pixels, a 5x7 bitmap font, and a PNG with stored
// (uncompressed) deflate blocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kvferry::cli {

struct BarChart {
  std::string title;                // top line
  std::string y_label;              // e.g. "gb/s"
  std::vector<std::string> groups;  // x-axis groups, e.g. "gpu 256m"
  std::vector<std::string> series;  // bars within a group, e.g. "raw"
  // values[g][s]: the bar of series s in group g (>= 0; missing: 0).
  std::vector<std::vector<double>> values;
};

// An RGB image, row-major, 3 bytes per pixel.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  const uint8_t* at(int x, int y) const { return &rgb[(static_cast<size_t>(y) * width + x) * 3]; }
};

// Series colours, in order (raw, compressed, adaptive, then repeating).
void SeriesColor(size_t series, uint8_t out[3]);

Image RenderBarChart(const BarChart& chart);
// The image as PNG bytes (8-bit RGB, no interlace).
std::string EncodePng(const Image& image);
absl::Status WriteBarChartPng(const std::string& path, const BarChart& chart);

}  // namespace kvferry::cli
