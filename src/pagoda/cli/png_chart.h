// A horizontal bar chart written as a PNG with no image library: an RGB raster, a built-in 5x7 pixel font drawn
// at twice its size, and a PNG of stored (uncompressed) deflate blocks with its CRC-32 and Adler-32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pagoda {

struct ChartBar {
  std::string label;  // left of the bar
  double value = 0;   // bar length; <= 0 draws no bar
  std::string text;   // right of the bar ("1.23 ms")
  uint32_t color = 0x7f7f7f;  // 0xRRGGBB
};

struct BarChart {
  std::string title;
  std::vector<ChartBar> bars;
  std::vector<std::pair<uint32_t, std::string>> legend;  // color, meaning
  std::string footnote;
};

// The chart as PNG bytes. Text is drawn in capitals; characters outside the font draw as '?'.
std::vector<uint8_t> bar_chart_png(const BarChart& chart);

// A PNG of an RGB raster ([height][width][3]), stored deflate blocks.
std::vector<uint8_t> encode_png_rgb(const std::vector<uint8_t>& rgb, int width, int height);

}  // namespace pagoda
