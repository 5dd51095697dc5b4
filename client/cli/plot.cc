#include "client/cli/plot.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace kvferry::cli {
namespace {

// 5x7 glyphs, one 5-bit row each (bit 4 = leftmost). Letters are lower case;
// upper case is drawn as lower case.
struct Glyph {
  char c;
  uint8_t rows[7];
};
constexpr Glyph kFont[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1E, 0x01, 0x01, 0x0E, 0x01, 0x01, 0x1E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'a', {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F}}, {'b', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E}},
    {'c', {0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E}}, {'d', {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F}},
    {'e', {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E}}, {'f', {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08}},
    {'g', {0x00, 0x0F, 0x11, 0x11, 0x0F, 0x01, 0x0E}}, {'h', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'i', {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E}}, {'j', {0x02, 0x00, 0x06, 0x02, 0x02, 0x12, 0x0C}},
    {'k', {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12}}, {'l', {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'m', {0x00, 0x00, 0x1A, 0x15, 0x15, 0x11, 0x11}}, {'n', {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'o', {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E}}, {'p', {0x00, 0x00, 0x1E, 0x11, 0x1E, 0x10, 0x10}},
    {'q', {0x00, 0x00, 0x0D, 0x13, 0x0F, 0x01, 0x01}}, {'r', {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10}},
    {'s', {0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E}}, {'t', {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06}},
    {'u', {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D}}, {'v', {0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'w', {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A}}, {'x', {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11}},
    {'y', {0x00, 0x00, 0x11, 0x11, 0x0F, 0x01, 0x0E}}, {'z', {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F}},
    {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}}, {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}},
    {'/', {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00}}, {'-', {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}}, {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
    {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}}, {',', {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08}},
    {'=', {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00}},
};

const Glyph* Find(char c) {
  c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& g : kFont) {
    if (g.c == c) return &g;
  }
  return nullptr;  // drawn as a space
}

struct Canvas {
  Image img;
  Canvas(int w, int h) {
    img.width = w;
    img.height = h;
    img.rgb.assign(static_cast<size_t>(w) * h * 3, 255);
  }
  void Set(int x, int y, const uint8_t c[3]) {
    if (x < 0 || y < 0 || x >= img.width || y >= img.height) return;
    std::memcpy(&img.rgb[(static_cast<size_t>(y) * img.width + x) * 3], c, 3);
  }
  void Fill(int x0, int y0, int x1, int y1, const uint8_t c[3]) {  // [x0, x1) x [y0, y1)
    for (int y = y0; y < y1; ++y) {
      for (int x = x0; x < x1; ++x) Set(x, y, c);
    }
  }
  static int TextWidth(const std::string& s, int scale) {
    return s.empty() ? 0 : static_cast<int>(s.size()) * 6 * scale - scale;
  }
  void Text(int x, int y, const std::string& s, int scale, const uint8_t c[3]) {
    for (char ch : s) {
      if (const Glyph* g = Find(ch)) {
        for (int r = 0; r < 7; ++r) {
          for (int b = 0; b < 5; ++b) {
            if (g->rows[r] & (0x10 >> b))
              Fill(x + b * scale, y + r * scale, x + (b + 1) * scale, y + (r + 1) * scale, c);
          }
        }
      }
      x += 6 * scale;
    }
  }
};

// A round step (1, 2 or 5 x 10^k) near `raw`.
double NiceStep(double raw) {
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

uint32_t Crc32(const uint8_t* p, size_t n, uint32_t crc = 0) {
  static uint32_t table[256];
  static bool init = [] {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    return true;
  }();
  (void)init;
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

void Put32(std::string* s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s->push_back(static_cast<char>(v >> (8 * i)));
}

void Chunk(std::string* png, const char type[4], const std::string& data) {
  Put32(png, static_cast<uint32_t>(data.size()));
  std::string body(type, 4);
  body += data;
  png->append(body);
  Put32(png, Crc32(reinterpret_cast<const uint8_t*>(body.data()), body.size()));
}

}  // namespace

void SeriesColor(size_t series, uint8_t out[3]) {
  static const uint8_t kColors[][3] = {{127, 127, 127}, {31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40}};
  std::memcpy(out, kColors[series % 5], 3);
}

Image RenderBarChart(const BarChart& chart) {
  const int W = 1000, H = 560, left = 80, right = 170, top = 60, bottom = 70;
  Canvas cv(W, H);
  const uint8_t black[3] = {0, 0, 0}, grid[3] = {225, 225, 225}, grey[3] = {90, 90, 90};
  const int x0 = left, x1 = W - right, y0 = top, y1 = H - bottom;
  double vmax = 0;
  for (const auto& g : chart.values) {
    for (double v : g) vmax = std::max(vmax, v);
  }
  const double step = NiceStep(std::max(vmax, 1e-9) * 1.1 / 5);
  const double ymax = step * std::ceil(std::max(vmax, 1e-9) * 1.1 / step);
  auto ypix = [&](double v) { return y1 - static_cast<int>(std::lround(v / ymax * (y1 - y0))); };
  cv.Text(x0, 16, chart.title, 2, black);
  cv.Text(8, y0 - 36, chart.y_label, 2, black);
  // Grid lines and tick labels.
  const int decimals = step >= 1 ? 0 : step >= 0.1 ? 1 : 2;
  for (double v = 0; v <= ymax + step / 2; v += step) {
    const int y = ypix(v);
    cv.Fill(x0, y, x1, y + 1, grid);
    const std::string label = absl::StrFormat("%.*f", decimals, v);
    cv.Text(x0 - 8 - Canvas::TextWidth(label, 2), y - 7, label, 2, grey);
  }
  // Bars.
  const size_t G = chart.groups.size(), S = std::max<size_t>(chart.series.size(), 1);
  const double gw = G ? static_cast<double>(x1 - x0) / G : 0;
  const double bw = gw * 0.8 / S;
  for (size_t g = 0; g < G; ++g) {
    for (size_t s = 0; s < S && g < chart.values.size() && s < chart.values[g].size(); ++s) {
      const double v = std::max(0.0, chart.values[g][s]);
      const int bx0 = x0 + static_cast<int>(g * gw + gw * 0.1 + s * bw);
      const int bx1 = std::max(bx0 + 1, static_cast<int>(x0 + g * gw + gw * 0.1 + (s + 1) * bw) - 2);
      uint8_t c[3];
      SeriesColor(s, c);
      cv.Fill(bx0, ypix(v), bx1, y1, c);
      if (bw >= 26) {
        const std::string label = absl::StrFormat("%.2f", v);
        cv.Text((bx0 + bx1) / 2 - Canvas::TextWidth(label, 1) / 2, ypix(v) - 10, label, 1, grey);
      }
    }
    // Group label, one word per line.
    int ly = y1 + 8;
    for (absl::string_view word : absl::StrSplit(chart.groups[g], ' ', absl::SkipEmpty())) {
      const std::string w(word);
      const int cx = x0 + static_cast<int>(g * gw + gw / 2);
      cv.Text(cx - Canvas::TextWidth(w, 2) / 2, ly, w, 2, black);
      ly += 18;
    }
  }
  // Axes and legend.
  cv.Fill(x0, y0, x0 + 1, y1 + 1, black);
  cv.Fill(x0, y1, x1, y1 + 1, black);
  for (size_t s = 0; s < chart.series.size(); ++s) {
    uint8_t c[3];
    SeriesColor(s, c);
    const int ly = y0 + static_cast<int>(s) * 26;
    cv.Fill(x1 + 16, ly, x1 + 32, ly + 14, c);
    cv.Text(x1 + 40, ly, chart.series[s], 2, black);
  }
  return std::move(cv.img);
}

std::string EncodePng(const Image& img) {
  // Scanlines with filter byte 0, in stored deflate blocks of <= 65535 bytes.
  std::string raw;
  raw.reserve((static_cast<size_t>(img.width) * 3 + 1) * img.height);
  for (int y = 0; y < img.height; ++y) {
    raw.push_back(0);
    raw.append(reinterpret_cast<const char*>(img.at(0, y)), static_cast<size_t>(img.width) * 3);
  }
  std::string z = {0x78, 0x01};
  for (size_t off = 0; off < raw.size() || off == 0; off += 65535) {
    const size_t n = std::min<size_t>(65535, raw.size() - off);
    z.push_back(off + n >= raw.size() ? 1 : 0);
    z.push_back(static_cast<char>(n & 0xFF));
    z.push_back(static_cast<char>(n >> 8));
    z.push_back(static_cast<char>(~n & 0xFF));
    z.push_back(static_cast<char>((~n >> 8) & 0xFF));
    z.append(raw, off, n);
    if (raw.empty()) break;
  }
  uint32_t a = 1, b = 0;
  for (unsigned char c : raw) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  Put32(&z, (b << 16) | a);
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  Put32(&ihdr, static_cast<uint32_t>(img.width));
  Put32(&ihdr, static_cast<uint32_t>(img.height));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit, RGB, deflate, filter 0, no interlace
  Chunk(&png, "IHDR", ihdr);
  Chunk(&png, "IDAT", z);
  Chunk(&png, "IEND", "");
  return png;
}

absl::Status WriteBarChartPng(const std::string& path, const BarChart& chart) {
  const std::string png = EncodePng(RenderBarChart(chart));
  std::ofstream f(path, std::ios::binary);
  f.write(png.data(), static_cast<std::streamsize>(png.size()));
  f.close();
  if (!f) return absl::InternalError(absl::StrFormat("cannot write %s", path));
  return absl::OkStatus();
}

}  // namespace kvferry::cli
