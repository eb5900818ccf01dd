// libFuzzer target: the tune cache file (src/core/tune_cache.c). The input
// is the file's bytes (seeded with a real cache): the store opens it, or
// sets it aside and starts afresh, and every row it hands out is whole
// (every string present and terminated) — never a crash. Each run starts a
// fresh store on a private directory. Without SQLite the store is memory
// only and the target checks that much.
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tune/tune_cache.h"
#include "cube/cube.h"

static char g_dir[] = "/tmp/cube-fuzz-tune-XXXXXX";

static void empty_dir(void) {
  DIR *d = opendir(g_dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, e->d_name);
    unlink(path);
  }
  if (d) closedir(d);
}

static bool visit(const cube_tune_entry_t *e, void *user) {
  const char *fields[] = {e->device, e->device_name, e->op,     e->checksum,
                          e->key,    e->winner,      e->results};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; ++i)
    if (!fields[i] || strlen(fields[i]) > (1u << 24)) abort();
  ++*(uint64_t *)user;
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool made;
  if (!made) {
    if (!mkdtemp(g_dir)) return 0;
    char path[512];
    snprintf(path, sizeof path, "%s/tune.sqlite", g_dir);
    setenv("CUBE_TUNE_CACHE", path, 1);
    setenv("CUBE_LOG", "off", 1);
    made = true;
  }
  cube_tune_store_close();
  empty_dir();
  char path[512];
  snprintf(path, sizeof path, "%s/tune.sqlite", g_dir);
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  fwrite(data, 1, size, f);
  fclose(f);
  uint64_t rows = 0;
  cube_status_t st = cube_tune_cache_visit(NULL, NULL, visit, &rows);
  if (!cube_status_is_ok(st)) {
    if (!cube_status_message(st)[0]) abort();
    cube_status_release(st);
  }
  rows = 0;
  st = cube_tune_cache_visit("op", "key", visit, &rows);
  if (!cube_status_is_ok(st)) cube_status_release(st);
  cube_tune_store_close();
  return 0;
}
