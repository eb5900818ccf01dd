// cubec core — the public face of the kernel cache for tools
// (include/cube/cache.h): the directory the configuration names, walked
// through the store (kernel_store.c). Above the store; calls nothing above.
#include <stdio.h>
#include <string.h>

#include "core/cache_dir.h"
#include "core/config.h"
#include "core/kernel_store.h"
#include "cube/cache.h"

cube_status_t cube_cache_walk(cube_cache_action_t action, cube_cache_visit_t visit, void *context,
                              cube_cache_report_t *out_report) {
  if (!out_report)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_cache_walk: out_report is NULL");
  memset(out_report, 0, sizeof *out_report);
  if (action != CUBE_CACHE_INFO && action != CUBE_CACHE_VERIFY && action != CUBE_CACHE_CLEAR)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_cache_walk: unknown action %d",
                            (int)action);
  cube_config_t config;
  cube_status_t status = cube_config_load(&config);
  if (!cube_status_is_ok(status))
    return cube_status_wrap(status, CUBE_STATUS_VALIDATION,
                            "cube_cache_walk: the environment holds a value cubec cannot use");
  out_report->max_bytes = cube_config_u64(&config, CUBE_CONFIG_CACHE_MAX_BYTES);
  char base[CUBE_CACHE_PATH_MAX];
  bool located =
      cube_cache_dir_where(&config, base, sizeof base, out_report->why, sizeof out_report->why);
  if (located && snprintf(out_report->directory, sizeof out_report->directory, "%s/%s", base,
                          CUBE_KSTORE_SUBDIR) >= (int)sizeof out_report->directory) {
    snprintf(out_report->why, sizeof out_report->why, "the cache directory path is too long");
    located = false;
  }
  cube_config_release(&config);
  if (!located) {
    out_report->directory[0] = '\0';
    return CUBE_OK;
  }
  // The same checks a client makes, with the reason kept for the report.
  cube_cache_dir_t dir;
  out_report->usable = cube_cache_dir_open_path(out_report->directory, &dir, out_report->why,
                                                sizeof out_report->why);
  cube_cache_dir_close(&dir);
  if (out_report->usable && out_report->max_bytes == 0)
    snprintf(out_report->why, sizeof out_report->why,
             "CUBE_CACHE_MAX_BYTES=0: clients keep kernels in memory only");
  if (!out_report->usable) return CUBE_OK;
  cube_kstore_t *store = NULL;
  // A cap that never evicts: a walk removes only what its action says.
  status = cube_kstore_open_path(out_report->directory, UINT64_MAX, NULL, &store);
  if (!cube_status_is_ok(status)) return status;
  static const cube_kstore_walk_t kWalks[] = {
      [CUBE_CACHE_INFO] = CUBE_KSTORE_WALK_INFO,
      [CUBE_CACHE_VERIFY] = CUBE_KSTORE_WALK_VERIFY,
      [CUBE_CACHE_CLEAR] = CUBE_KSTORE_WALK_CLEAR,
  };
  cube_kstore_report_t report;
  cube_kstore_walk(store, kWalks[action], visit, context, &report);
  cube_kstore_release(store);
  out_report->entries = report.entries;
  out_report->bytes = report.bytes;
  out_report->damaged = report.damaged;
  out_report->removed = report.removed;
  out_report->leftovers = report.leftovers;
  return CUBE_OK;
}
