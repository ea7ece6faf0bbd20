# Library sources, and the ISA flags that go on kernel files only: the library
# itself must run on any x86-64 (dispatch picks the path at run time).
function(tops_collect_sources out)
  set(root ${CMAKE_SOURCE_DIR}/src)
  file(GLOB common CONFIGURE_DEPENDS
    ${root}/core/*.c ${root}/device/*.c ${root}/cpu/*.c ${root}/formats/*.c ${root}/ops/*.c
    ${root}/drive/*.c ${root}/io/*.c ${root}/kernels/ref/*.c)
  set(all ${common})
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
    file(GLOB avx2 CONFIGURE_DEPENDS ${root}/kernels/avx2/*.c)
    set_source_files_properties(${avx2} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mbmi2")
    file(GLOB avx512 CONFIGURE_DEPENDS ${root}/kernels/avx512/*.c)
    set_source_files_properties(${avx512} PROPERTIES COMPILE_OPTIONS
      "-mavx2;-mfma;-mf16c;-mbmi2;-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mavx512bf16")
    list(APPEND all ${avx2} ${avx512})
    # AMX tile kernels where the compiler has the intrinsics (gcc >= 11,
    # clang >= 12); the amx level then uses them (TOPS_HAVE_AMX_KERNELS).
    include(CheckCCompilerFlag)
    check_c_compiler_flag("-mamx-tile -mamx-int8 -mamx-bf16" TOPS_CC_HAS_AMX)
    if(TOPS_CC_HAS_AMX)
      file(GLOB amx CONFIGURE_DEPENDS ${root}/kernels/amx/*.c)
      set_source_files_properties(${amx} PROPERTIES COMPILE_OPTIONS
        "-mavx2;-mfma;-mf16c;-mbmi2;-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mavx512bf16;-mamx-tile;-mamx-int8;-mamx-bf16")
      list(APPEND all ${amx})
      add_compile_definitions(TOPS_HAVE_AMX_KERNELS=1)
    endif()
    add_compile_definitions(TOPS_HAVE_X86_KERNELS=1)
  elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
    file(GLOB neon CONFIGURE_DEPENDS ${root}/kernels/neon/*.c)
    set_source_files_properties(${neon} PROPERTIES COMPILE_OPTIONS "-march=armv8.2-a+dotprod+fp16")
    list(APPEND all ${neon})  # no NEON kernels yet: no NEON levels (src/cpu/dispatch.c)
  endif()
  set(${out} ${all} PARENT_SCOPE)
endfunction()
