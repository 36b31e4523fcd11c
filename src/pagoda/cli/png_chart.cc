#include "pagoda/cli/png_chart.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace pagoda {
namespace {

// 5x7 glyphs, one byte a row, bit 4 the leftmost pixel.
struct Glyph {
  char c;
  std::array<uint8_t, 7> rows;
};
constexpr Glyph kFont[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'A', {0x0E, 0x11, 0x11, 0x11, 0x1F, 0x11, 0x11}}, {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
    {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}}, {'D', {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C}},
    {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}}, {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
    {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}}, {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}}, {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
    {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}}, {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
    {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}}, {'N', {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}},
    {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
    {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}}, {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
    {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}}, {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}}, {'X', {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}},
    {'Y', {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04}}, {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}},
    {' ', {0, 0, 0, 0, 0, 0, 0}},                       {'.', {0, 0, 0, 0, 0, 0x0C, 0x0C}},
    {',', {0, 0, 0, 0, 0x0C, 0x04, 0x08}},              {':', {0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0}},
    {'-', {0, 0, 0, 0x1F, 0, 0, 0}},                    {'_', {0, 0, 0, 0, 0, 0, 0x1F}},
    {'=', {0, 0, 0x1F, 0, 0x1F, 0, 0}},                 {'/', {0, 0x01, 0x02, 0x04, 0x08, 0x10, 0}},
    {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}},  {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
    {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},  {'+', {0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0}},
    {'*', {0, 0x04, 0x15, 0x0E, 0x15, 0x04, 0}},        {'!', {0x04, 0x04, 0x04, 0x04, 0x04, 0, 0x04}},
    {'?', {0x0E, 0x11, 0x01, 0x02, 0x04, 0, 0x04}},     {'x', {0, 0, 0x11, 0x0A, 0x04, 0x0A, 0x11}},
    {'\'', {0x04, 0x04, 0x08, 0, 0, 0, 0}},           {';', {0, 0x0C, 0x0C, 0, 0x0C, 0x04, 0x08}},
};

constexpr int kScale = 2, kAdvance = 6 * kScale, kLine = 8 * kScale;

const Glyph& glyph(char c) {
  if (c != 'x') c = char(std::toupper(static_cast<unsigned char>(c)));
  for (const Glyph& g : kFont)
    if (g.c == c) return g;
  return glyph('?');
}

class Canvas {
 public:
  Canvas(int w, int h) : w_(w), h_(h), px_(size_t(w) * size_t(h) * 3, 0xFF) {}
  void rect(int x0, int y0, int x1, int y1, uint32_t color) {
    for (int y = std::max(0, y0); y < std::min(h_, y1); ++y)
      for (int x = std::max(0, x0); x < std::min(w_, x1); ++x) {
        uint8_t* p = px_.data() + (size_t(y) * size_t(w_) + size_t(x)) * 3;
        p[0] = uint8_t(color >> 16), p[1] = uint8_t(color >> 8), p[2] = uint8_t(color);
      }
  }
  // Text with its top-left corner at (x, y); returns the x after it.
  int text(int x, int y, const std::string& s, uint32_t color) {
    for (char c : s) {
      const Glyph& g = glyph(c);
      for (int r = 0; r < 7; ++r)
        for (int col = 0; col < 5; ++col)
          if (g.rows[size_t(r)] & (0x10 >> col))
            rect(x + col * kScale, y + r * kScale, x + (col + 1) * kScale, y + (r + 1) * kScale, color);
      x += kAdvance;
    }
    return x;
  }
  const std::vector<uint8_t>& pixels() const { return px_; }

 private:
  int w_, h_;
  std::vector<uint8_t> px_;
};

uint32_t crc32(const uint8_t* p, size_t n, uint32_t crc = 0) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

void put32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
}

void chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
  put32(out, uint32_t(data.size()));
  std::vector<uint8_t> body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  out.insert(out.end(), body.begin(), body.end());
  put32(out, crc32(body.data(), body.size()));
}

}  // namespace

std::vector<uint8_t> encode_png_rgb(const std::vector<uint8_t>& rgb, int width, int height) {
  // Scanlines, each led by filter type 0 (none).
  std::vector<uint8_t> raw;
  raw.reserve(size_t(height) * (size_t(width) * 3 + 1));
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    const auto row = rgb.begin() + std::ptrdiff_t(size_t(y) * size_t(width) * 3);
    raw.insert(raw.end(), row, row + std::ptrdiff_t(size_t(width) * 3));
  }
  // zlib: header (deflate, 32 KiB window, no dictionary, check bits), stored blocks of <= 65535 bytes, Adler-32.
  std::vector<uint8_t> z = {0x78, 0x01};
  size_t at = 0;
  do {
    const size_t n = std::min<size_t>(65535, raw.size() - at);
    z.push_back(at + n == raw.size() ? 1 : 0);  // BFINAL, BTYPE 00
    z.push_back(uint8_t(n)), z.push_back(uint8_t(n >> 8));
    z.push_back(uint8_t(~n)), z.push_back(uint8_t(~n >> 8));
    z.insert(z.end(), raw.begin() + std::ptrdiff_t(at), raw.begin() + std::ptrdiff_t(at + n));
    at += n;
  } while (at < raw.size());
  uint32_t a = 1, b = 0;
  for (uint8_t x : raw) a = (a + x) % 65521, b = (b + a) % 65521;
  put32(z, b << 16 | a);

  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put32(ihdr, uint32_t(width));
  put32(ihdr, uint32_t(height));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit, RGB, deflate, adaptive filtering, no interlace
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", {});
  return png;
}

std::vector<uint8_t> bar_chart_png(const BarChart& c) {
  constexpr int kWidth = 1100, kRow = 34, kMargin = 16;
  size_t label_chars = 8, text_chars = 4;
  for (const ChartBar& b : c.bars) {
    label_chars = std::max(label_chars, std::min<size_t>(b.label.size(), 48));
    text_chars = std::max(text_chars, std::min<size_t>(b.text.size(), 40));
  }
  const int x0 = kMargin + int(label_chars) * kAdvance + kMargin;
  const int bar_max = std::max(100, kWidth - x0 - int(text_chars) * kAdvance - 2 * kMargin);
  const int top = 2 * kMargin + kLine;
  const int height = top + kRow * int(c.bars.size()) + kMargin + 2 * (kLine + 8) + kMargin;
  Canvas cv(kWidth, height);
  cv.text(kMargin, kMargin, c.title, 0x000000);
  double vmax = 0;
  for (const ChartBar& b : c.bars) vmax = std::max(vmax, b.value);
  for (size_t i = 0; i < c.bars.size(); ++i) {
    const ChartBar& b = c.bars[i];
    const int y = top + kRow * int(i);
    cv.text(kMargin, y + (kRow - kLine) / 2, b.label.substr(0, 48), 0x000000);
    int x = x0;
    if (b.value > 0 && vmax > 0) {
      x = x0 + std::max(2, int(double(bar_max) * b.value / vmax));
      cv.rect(x0, y + 5, x, y + kRow - 5, b.color);
    }
    cv.text(x + 8, y + (kRow - kLine) / 2, b.text.substr(0, 40), 0x000000);
  }
  cv.rect(x0 - 1, top, x0 + 1, top + kRow * int(c.bars.size()), 0x000000);  // the axis at zero
  int y = top + kRow * int(c.bars.size()) + kMargin, x = kMargin;
  for (const auto& [color, meaning] : c.legend) {
    cv.rect(x, y, x + kLine, y + kLine, color);
    x = cv.text(x + kLine + 6, y + 1, meaning, 0x000000) + 2 * kAdvance;
  }
  cv.text(kMargin, y + kLine + 8, c.footnote, 0x404040);
  return encode_png_rgb(cv.pixels(), kWidth, height);
}

}  // namespace pagoda
