// The bench's PNG bar chart: bars stand where their values say, and the PNG
// decodes back to the rendered pixels with valid CRCs and Adler-32.
#include "client/cli/plot.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kvferry::cli {
namespace {

uint32_t Get32(const std::string& s, size_t off) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(s[off + i]);
  return v;
}

uint32_t Crc32(const std::string& s) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : s) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
  }
  return ~crc;
}

bool IsColor(const Image& img, int x, int y, const uint8_t c[3]) { return std::memcmp(img.at(x, y), c, 3) == 0; }

// The top of the bar in column x: the first row from the top with colour c.
int BarTop(const Image& img, int x, const uint8_t c[3]) {
  for (int y = 0; y < img.height; ++y) {
    if (IsColor(img, x, y, c)) return y;
  }
  return -1;
}

TEST(Plot, BarsAreProportionalToTheirValues) {
  BarChart chart{"test",
                 "gb/s",
                 {"host 64 MiB", "gpu 64 MiB"},
                 {"raw", "compressed", "adaptive"},
                 {{1.0, 2.0, 4.0}, {3.0, 0.0, 2.0}}};
  const Image img = RenderBarChart(chart);
  ASSERT_GT(img.width, 0);
  // Columns at the centre of each bar: x0 = 80, plot width 750, 2 groups.
  const double gw = 750.0 / 2, bw = gw * 0.8 / 3;
  int tops[2][3], bottom = -1;
  for (int g = 0; g < 2; ++g) {
    for (int s = 0; s < 3; ++s) {
      uint8_t c[3];
      SeriesColor(s, c);
      const int x = 80 + static_cast<int>(g * gw + gw * 0.1 + (s + 0.5) * bw);
      tops[g][s] = BarTop(img, x, c);
      if (chart.values[g][s] == 0) {
        EXPECT_EQ(tops[g][s], -1) << "a zero bar is not drawn";
        continue;
      }
      ASSERT_GE(tops[g][s], 0) << g << "," << s;
      int y = tops[g][s];
      while (y + 1 < img.height && IsColor(img, x, y + 1, c)) ++y;
      if (bottom < 0) bottom = y;
      EXPECT_EQ(y, bottom) << "bars share the zero line";
    }
  }
  // Heights proportional to values (within a pixel of rounding).
  const double unit = (bottom + 1 - tops[0][0]) / 1.0;
  EXPECT_NEAR(bottom + 1 - tops[0][1], 2 * unit, 2);
  EXPECT_NEAR(bottom + 1 - tops[0][2], 4 * unit, 2);
  EXPECT_NEAR(bottom + 1 - tops[1][0], 3 * unit, 2);
}

TEST(Plot, PngDecodesToTheRenderedPixels) {
  BarChart chart{"t", "y", {"a", "b", "c"}, {"raw", "compressed"}, {{1, 2}, {3, 4}, {5, 6}}};
  const Image img = RenderBarChart(chart);
  const std::string png = EncodePng(img);
  ASSERT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  size_t off = 8;
  std::string idat;
  std::vector<std::string> types;
  while (off < png.size()) {
    const uint32_t len = Get32(png, off);
    const std::string type = png.substr(off + 4, 4);
    const std::string body = png.substr(off + 4, 4 + len);
    EXPECT_EQ(Get32(png, off + 8 + len), Crc32(body)) << type;
    if (type == "IHDR") {
      EXPECT_EQ(Get32(png, off + 8), static_cast<uint32_t>(img.width));
      EXPECT_EQ(Get32(png, off + 12), static_cast<uint32_t>(img.height));
      EXPECT_EQ(png[off + 16], 8);  // bit depth
      EXPECT_EQ(png[off + 17], 2);  // RGB
    }
    if (type == "IDAT") idat += png.substr(off + 8, len);
    types.push_back(type);
    off += 12 + len;
  }
  EXPECT_EQ(off, png.size());
  EXPECT_EQ(types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  // zlib: header, stored blocks, Adler-32.
  ASSERT_GE(idat.size(), 6u);
  EXPECT_EQ((static_cast<uint8_t>(idat[0]) * 256 + static_cast<uint8_t>(idat[1])) % 31, 0);
  std::string raw;
  size_t p = 2;
  bool last = false;
  while (!last) {
    ASSERT_LE(p + 5, idat.size());
    last = idat[p] & 1;
    EXPECT_EQ((idat[p] >> 1) & 3, 0) << "stored block";
    const uint16_t n = static_cast<uint8_t>(idat[p + 1]) | static_cast<uint8_t>(idat[p + 2]) << 8;
    const uint16_t nn = static_cast<uint8_t>(idat[p + 3]) | static_cast<uint8_t>(idat[p + 4]) << 8;
    EXPECT_EQ(static_cast<uint16_t>(~n), nn);
    raw += idat.substr(p + 5, n);
    p += 5 + n;
  }
  uint32_t a = 1, b = 0;
  for (unsigned char c : raw) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  EXPECT_EQ(Get32(idat, p), (b << 16) | a);
  ASSERT_EQ(raw.size(), (static_cast<size_t>(img.width) * 3 + 1) * img.height);
  for (int y = 0; y < img.height; ++y) {
    const size_t row = y * (static_cast<size_t>(img.width) * 3 + 1);
    ASSERT_EQ(raw[row], 0) << "filter byte";
    ASSERT_EQ(std::memcmp(raw.data() + row + 1, img.at(0, y), img.width * 3), 0) << "row " << y;
  }
}

}  // namespace
}  // namespace kvferry::cli
