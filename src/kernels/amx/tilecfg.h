/* The tile configuration record (ldtilecfg's 64 bytes), and the
   configuration of the bf16-term and attention kernels: palette 1, tiles
   0..7 of 16 rows x 64 bytes (the i8 and code-tile kernels size theirs by
   the sub-block).  Included only by files built with the AMX flags. */
#ifndef TOPS_KERNELS_AMX_TILECFG_H
#define TOPS_KERNELS_AMX_TILECFG_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

typedef struct tops__amx_tilecfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tops__amx_tilecfg;

static inline void tops__amx_configure(void) {
    _Alignas(64) tops__amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    /* gcc's _tile_loadconfig names only the first 8 bytes as read: without
       this barrier the colsb / rows stores can be dropped as dead. */
    __asm__ volatile("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
}

#endif
