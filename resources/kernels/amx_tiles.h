// AMX tiles, where the processor has them and the operating system lends them to this process: the products of
// int8_products.h and block_products.h then take steps of many rows 16 rows to an instruction. Their int32 sums
// are exact, so a row's result is the same with or without tiles.
#pragma once

#if defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__linux__)
#define LOOKAHEAD_AMX_TILES 1
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace lookahead {

constexpr int64_t kTileRows = 16;  // input rows a tile holds

// Linux lends a process the tile registers only when it asks (arch_prctl ARCH_REQ_XCOMP_PERM, XTILEDATA);
// where it refuses, the products stay on vpdpbusd.
inline bool tiles_granted() {
  static const bool granted = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return granted;
}

// A thread's tile configuration (palette 1): each tile's rows and bytes a row.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};

  void set(int tile, int64_t tile_rows, int64_t bytes) {
    rows[tile] = static_cast<uint8_t>(tile_rows);
    colsb[tile] = static_cast<uint16_t>(bytes);
  }
  void load() const { _tile_loadconfig(this); }
};

}  // namespace lookahead
#endif
