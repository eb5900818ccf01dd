// cubec — host conversions of reduced-precision numbers (cube/numeric.h).
//
// The bodies are the dialect's own (include/cube/dialect.h, "Reduced
// precision"), included here so the host and the kernels cannot drift apart.
#include "cube/numeric.h"

#include "cube/dialect.h"

uint16_t cube_f16_from_f32(float value) {
  return cube__f32_to_f16(value).bits;
}
float cube_f16_to_f32(uint16_t bits) {
  return cube__f16_to_f32(cube__f16_of(bits));
}
uint16_t cube_bf16_from_f32(float value) {
  return cube__f32_to_bf16(value).bits;
}
float cube_bf16_to_f32(uint16_t bits) {
  return cube__bf16_to_f32(cube__bf16_of(bits));
}
uint8_t cube_e4m3_from_f32(float value) {
  return cube__f32_to_e4m3(value).bits;
}
float cube_e4m3_to_f32(uint8_t bits) {
  return cube__e4m3_to_f32(cube__e4m3_of(bits));
}
uint8_t cube_e5m2_from_f32(float value) {
  return cube__f32_to_e5m2(value).bits;
}
float cube_e5m2_to_f32(uint8_t bits) {
  return cube__e5m2_to_f32(cube__e5m2_of(bits));
}
