// cubec core — TMA tensor maps: the seed's conversions and validation rules
// (002's create_tensor_map and check_tma_*), written once for every backend.
//
// A launch prepares each map before dispatch: the device refusals first
// (no TMA; im2col-wide below compute capability 10.0), then the rules that
// need no driver — so the CPU and fault backends answer exactly as CUDA —
// then the conversions. The backend encodes; when the driver still refuses,
// cube_tensor_map_explain runs the seed's checks in the seed's order to name
// the cause (first failing check wins, generic before format checks), else
// reports the driver's error. docs/tma.md lists every rule.
#ifndef CUBE_CORE_TENSOR_MAP_H_
#define CUBE_CORE_TENSOR_MAP_H_

#include "core/backend.h"
#include "core/server.h"
#include "core/tensor_map_types.h"

// Which rules a check runs.
typedef enum cube_tmap_pass_t {
  // Before dispatch: every rule the driver enforces too. Three seed rules
  // are stricter than the H200's driver and are left to the explanation
  // pass, so cubec never refuses what the driver would encode: 32-byte
  // alignment with 16B interleave (the driver asks it for 32B only), a
  // dimension of exactly 2^32 (the driver allows it), and an innermost
  // element stride other than 1 without interleave (the driver ignores it).
  CUBE_TMAP_PRECHECK = 0,
  // After the driver refused: the seed's rules as written, in its order,
  // then cubec's added ones.
  CUBE_TMAP_EXPLAIN = 1,
} cube_tmap_pass_t;

// The first rule |desc| breaks for a tensor at |address| in a binding of
// |binding_size| bytes on a device with |props|: writes its message (the
// seed's words where the seed has the rule) into |message| and returns
// true; false when every rule holds.
CUBE_INTERNAL bool cube_tensor_map_check(const cube_tensor_map_desc_t *desc, uint64_t address,
                                         uint64_t binding_size,
                                         const cube_device_properties_t *props,
                                         cube_tmap_pass_t pass, char *message, size_t capacity);

// The device refusals (COMPILE_REFUSED, a refusal): no TMA on this device,
// im2col-wide below compute capability 10.0. CUBE_OK otherwise. A backend
// that copies tensor maps itself (|emulated|: the CPU) is refused nothing
// here; cube_tensor_map_prepare refuses, after the rules, what its copies
// cannot realise exactly (interleave, the 128B atom swizzles, im2col-wide,
// packed fp4), so a dry run finds it too.
CUBE_INTERNAL cube_status_t cube_tensor_map_refusal(const cube_tensor_map_desc_t *desc,
                                                    const cube_device_properties_t *props,
                                                    bool emulated, const char *kernel,
                                                    uint32_t index);

// The seed's conversions: reversed shape, reversed strides with the
// innermost dropped and scaled to bytes, reversed tile, element strides and
// corners, the element-type mapping. |desc| must have passed the checks.
CUBE_INTERNAL void cube_tensor_map_convert(const cube_tensor_map_desc_t *desc, uint64_t address,
                                           cube_tmap_encode_t *out_request);

// Refusal, pre-check and conversion of the map at argument |index| of a
// launch of |kernel|: LAUNCH_UNKNOWN "launch of 'k': tensor map i: <rule>"
// for a malformed map, COMPILE_REFUSED for a device refusal (and, after the
// rules, for what an emulating backend cannot copy exactly).
CUBE_INTERNAL cube_status_t cube_tensor_map_prepare(const cube_tensor_map_desc_t *desc,
                                                    uint64_t address, uint64_t binding_size,
                                                    const cube_device_properties_t *props,
                                                    bool emulated, const char *kernel,
                                                    uint32_t index,
                                                    cube_tmap_encode_t *out_request);

// After the backend's encode failed with |error| (taken): a refusal or a
// poisoned device is returned as is; otherwise the explanation pass names
// the cause (LAUNCH_UNKNOWN with |error| as its cause), or, when no rule
// fires, the map is refused (COMPILE_REFUSED naming its fields, |error| the
// cause): the driver will not encode it.
CUBE_INTERNAL cube_status_t cube_tensor_map_explain(cube_status_t error,
                                                    const cube_tensor_map_desc_t *desc,
                                                    uint64_t address, uint64_t binding_size,
                                                    const cube_device_properties_t *props,
                                                    const char *kernel, uint32_t index);

//===--- A launch's maps (launch.c) ---===//

// The encoded maps of one launch, in argument order.
typedef struct cube_launch_maps_t {
  uint32_t mask;  // bit i: argument i is a map
  uint32_t count;
  cube_tmap_t maps[CUBE_MAX_BUFFERS];
} cube_launch_maps_t;

// VALIDATION when a launch's arguments do not fit the kernel's declared
// parameters: a map where the kernel takes a buffer, a buffer where it takes
// a map, a map the kernel has no parameter for, a map parameter the launch
// does not pass. |compiled| is the kernel's IO answer ("" or NULL: no
// answer, nothing checked).
CUBE_INTERNAL cube_status_t cube_tensor_map_match(const char *kernel, const char *compiled,
                                                  const cube_kernel_args_t *args);

// Prepares every map of a launch of |kernel| on |device| (arguments at
// |addresses|, bindings of |sizes| bytes) and, when |encode|, encodes them
// through the backend into |out|; a driver refusal is explained
// (cube_tensor_map_explain). Bit i of |writes| says the launch writes
// argument i: a tiled map stored through must have an innermost extent of
// whole 16-byte granules (the TMA unit clips stores at 16 bytes), else
// COMPILE_REFUSED. A dry run passes |encode| false: the checks, and the
// encode into scratch where it is pure, no map. |cache| (NULL: none) keeps encoded maps where the
// device's encode is pure (CUBE_BACKEND_CAP_TENSOR_MAP_PURE). The caller notes the status (poison)
// and claims the outputs.
CUBE_INTERNAL cube_status_t cube_tensor_map_launch(cube_backend_device_t *device,
                                                   cube_tmap_cache_t *cache, const char *kernel,
                                                   const cube_kernel_args_t *args,
                                                   const uint64_t *addresses, const uint64_t *sizes,
                                                   uint32_t writes, bool encode,
                                                   cube_launch_maps_t *out);

// The largest box cubec lets a map move in one copy on |props| (bytes): a
// multiprocessor's shared memory (the opt-in per cube + 1 KiB). The H200
// refuses a 229x256 f32 box although every dimension is <= 256.
CUBE_INTERNAL uint64_t cube_tensor_map_max_box_bytes(const cube_device_properties_t *props);

#endif  // CUBE_CORE_TENSOR_MAP_H_
