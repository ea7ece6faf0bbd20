/* The tile configuration record (ldtilecfg's 64 bytes), and the
   configuration of the bf16-term and attention kernels: palette 1, tiles
   0..7 of 16 rows x 64 bytes (the i8 and code-tile kernels size theirs by
   the sub-block).  Included only by files built with the AMX flags.

   Every kernel call loads its configuration through tops__amx_load_cfg,
   which skips ldtilecfg when the thread's tiles already hold that
   configuration (sttilecfg, then a compare): ldtilecfg costs far more
   than a store of the current one, and a driver calls the kernels tens of
   thousands of times a call.  Reading the current configuration back
   (rather than remembering what was loaded) keeps this correct whatever
   ran on the thread in between (another library's tiles, a release). */
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

static inline void tops__amx_load_cfg(const tops__amx_tilecfg *cfg) {
    _Alignas(64) tops__amx_tilecfg cur;
    _tile_storeconfig(&cur);
    /* gcc's _tile_storeconfig names only 8 bytes as written */
    __asm__ volatile("" : : "r"(&cur) : "memory");
    if (memcmp(&cur, cfg, sizeof cur) == 0) return;
    /* gcc's _tile_loadconfig names only the first 8 bytes as read: without
       this barrier the colsb / rows stores can be dropped as dead. */
    __asm__ volatile("" : : "r"(cfg) : "memory");
    _tile_loadconfig(cfg);
}

static inline void tops__amx_configure(void) {
    _Alignas(64) tops__amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    tops__amx_load_cfg(&cfg);
}

#endif
