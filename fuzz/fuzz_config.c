// libFuzzer target: the environment parser (src/core/config.c). The input is
// read as NAME=VALUE lines; every entry's value parser also sees the whole
// input as one value. Each value is accepted (within its bounds) or refused
// with a VALIDATION error naming its variable.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"

typedef struct lines_t {
  char *names[64];
  char *values[64];
  int count;
} lines_t;

static const char *lookup(void *context, const char *name) {
  lines_t *lines = context;
  for (int i = 0; i < lines->count; ++i) {
    if (strcmp(lines->names[i], name) == 0) return lines->values[i];
  }
  return NULL;
}

static void check(cube_config_id_t id, cube_status_t status, const cube_config_value_t *value) {
  const cube_config_entry_t *entry = cube_config_entry(id);
  if (cube_status_is_ok(status)) {
    bool numeric = entry->kind == CUBE_CONFIG_SIZE || entry->kind == CUBE_CONFIG_COUNT;
    if (value->set && numeric && (value->value < entry->min || value->value > entry->max))
      abort();  // an accepted value outside its bounds
    free(value->text);
  } else if (cube_status_code(status) != CUBE_STATUS_VALIDATION ||
             !strstr(cube_status_message(status), entry->name)) {
    abort();  // refused otherwise than VALIDATION naming the variable
  }
  cube_status_release(status);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  for (int id = 0; id < CUBE_CONFIG_COUNT_OF; ++id) {
    cube_config_value_t value = {0};
    check((cube_config_id_t)id, cube_config_parse_value((cube_config_id_t)id, text, &value),
          &value);
  }
  uint64_t size_value = 0;
  (void)cube_config_parse_size(text, &size_value);

  lines_t lines = {.count = 0};
  for (char *save = NULL, *line = strtok_r(text, "\n", &save); line && lines.count < 64;
       line = strtok_r(NULL, "\n", &save)) {
    char *equals = strchr(line, '=');
    if (!equals) continue;
    *equals = '\0';
    lines.names[lines.count] = line;
    lines.values[lines.count] = equals + 1;
    lines.count++;
  }
  cube_config_t config;
  cube_status_t status = cube_config_parse(lookup, &lines, &config);
  if (cube_status_is_ok(status)) {
    cube_config_t copy;
    if (cube_status_is_ok(cube_config_copy(&config, &copy))) cube_config_release(&copy);
    cube_config_release(&config);
  } else if (cube_status_code(status) != CUBE_STATUS_VALIDATION) {
    abort();
  }
  cube_status_release(status);
  free(text);
  return 0;
}
