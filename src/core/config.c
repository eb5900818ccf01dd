// cubec core — the configuration (config.h).
#include "core/config.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const cube_config_entry_t kEntries[CUBE_CONFIG_COUNT_OF] = {
#define CUBE_CONFIG_X(id, name, kind, def, min, max, flags, choices, doc) \
  [CUBE_CONFIG_##id] = {name, CUBE_CONFIG_##kind, def, min, max, flags, choices, doc},
    CUBE_CONFIG_ENTRIES(CUBE_CONFIG_X)
#undef CUBE_CONFIG_X
};

const cube_config_entry_t *cube_config_entry(cube_config_id_t id) {
  return (unsigned)id < CUBE_CONFIG_COUNT_OF ? &kEntries[id] : NULL;
}

//===--- Scalars ---===//

static bool parse_digits(const char **cursor, unsigned base, uint64_t *out_value) {
  const char *p = *cursor;
  uint64_t value = 0;
  bool any = false;
  for (;; ++p) {
    unsigned digit;
    if (*p >= '0' && *p <= '9') {
      digit = (unsigned)(*p - '0');
    } else if (base == 16 && *p >= 'a' && *p <= 'f') {
      digit = (unsigned)(*p - 'a' + 10);
    } else if (base == 16 && *p >= 'A' && *p <= 'F') {
      digit = (unsigned)(*p - 'A' + 10);
    } else {
      break;
    }
    if (value > (UINT64_MAX - digit) / base) return false;  // overflow
    value = value * base + digit;
    any = true;
  }
  if (!any) return false;
  *cursor = p;
  *out_value = value;
  return true;
}

bool cube_config_parse_size(const char *text, uint64_t *out_value) {
  if (!text) return false;
  const char *p = text;
  unsigned base = 10;
  if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
    base = 16;
    p += 2;
  }
  uint64_t value = 0;
  if (!parse_digits(&p, base, &value)) return false;
  unsigned shift = 0;
  switch (*p) {
    case 'k':
    case 'K':
      shift = 10;
      break;
    case 'm':
    case 'M':
      shift = 20;
      break;
    case 'g':
    case 'G':
      shift = 30;
      break;
    case 't':
    case 'T':
      shift = 40;
      break;
    default:
      break;
  }
  if (shift) {
    ++p;
    if (strcmp(p, "iB") == 0 || strcmp(p, "B") == 0) p += strlen(p);
  } else if (strcmp(p, "B") == 0) {
    ++p;
  }
  if (*p != '\0') return false;
  if (shift && value > (UINT64_MAX >> shift)) return false;
  *out_value = value << shift;
  return true;
}

static bool parse_count(const char *text, uint64_t *out_value) {
  const char *p = text;
  uint64_t value = 0;
  if (!parse_digits(&p, 10, &value) || *p != '\0') return false;
  *out_value = value;
  return true;
}

static bool word_is(const char *text, const char *word) {
  return strcasecmp(text, word) == 0;
}

static bool parse_switch(const char *text, uint64_t *out_value) {
  if (word_is(text, "1") || word_is(text, "on") || word_is(text, "true") || word_is(text, "yes")) {
    *out_value = 1;
    return true;
  }
  if (word_is(text, "0") || word_is(text, "off") || word_is(text, "false") || word_is(text, "no")) {
    *out_value = 0;
    return true;
  }
  return false;
}

static bool parse_choice(const char *text, const char *choices, uint64_t *out_value) {
  size_t length = strlen(text);
  uint64_t index = 0;
  for (const char *word = choices; *word; ++index) {
    const char *bar = strchr(word, '|');
    size_t n = bar ? (size_t)(bar - word) : strlen(word);
    if (n == length && strncmp(word, text, n) == 0) {
      *out_value = index;
      return true;
    }
    word += n + (bar ? 1 : 0);
  }
  return false;
}

// "64 KiB", "1 GiB", "4096 bytes": what an error message shows for a bound.
static void describe_size(uint64_t value, char *out, size_t capacity) {
  static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  size_t unit = 0;
  uint64_t v = value;
  while (v >= 1024 && v % 1024 == 0 && unit + 1 < sizeof units / sizeof units[0]) {
    v /= 1024;
    ++unit;
  }
  if (unit == 0) {
    snprintf(out, capacity, "%" PRIu64 " bytes", value);
  } else {
    snprintf(out, capacity, "%" PRIu64 " %s", v, units[unit]);
  }
}

static void describe_bound(const cube_config_entry_t *entry, uint64_t value, char *out,
                           size_t capacity) {
  if (entry->kind == CUBE_CONFIG_SIZE) {
    describe_size(value, out, capacity);
  } else {
    snprintf(out, capacity, "%" PRIu64, value);
  }
}

// A quoted, shortened, printable rendering of |text| for messages.
static void quote(const char *text, char *out, size_t capacity) {
  size_t used = 0;
  for (const char *p = text; *p && used + 5 < capacity; ++p) {
    unsigned char c = (unsigned char)*p;
    if (isprint(c)) {
      out[used++] = (char)c;
    } else {
      used += (size_t)snprintf(out + used, capacity - used, "\\x%02x", c);
    }
    if (p - text >= 80) {
      snprintf(out + used, capacity - used, "...");
      used += 3;
      break;
    }
  }
  out[used < capacity ? used : capacity - 1] = '\0';
}

static cube_status_t refuse(const cube_config_entry_t *entry, const char *text, const char *why) {
  char shown[128];
  quote(text, shown, sizeof shown);
  return cube_status_make(CUBE_STATUS_VALIDATION, "environment variable %s='%s': %s", entry->name,
                          shown, why);
}

static bool is_printable(const char *text) {
  for (const char *p = text; *p; ++p) {
    if (!isprint((unsigned char)*p)) return false;
  }
  return true;
}

static bool all_of(const char *text, const char *allowed_extra, bool blanks) {
  for (const char *p = text; *p; ++p) {
    unsigned char c = (unsigned char)*p;
    if (isalnum(c) || (c && strchr(allowed_extra, c)) || (blanks && c == ' ')) continue;
    return false;
  }
  return true;
}

//===--- One value ---===//

static cube_status_t check_text(const cube_config_entry_t *entry, const char *text) {
  size_t length = strlen(text);
  char why[160];
  if (length > entry->max) {
    snprintf(why, sizeof why, "%zu bytes long; at most %" PRIu64 " are accepted", length,
             entry->max);
    return refuse(entry, text, why);
  }
  switch (entry->kind) {
    case CUBE_CONFIG_PATH:
      if (!is_printable(text)) return refuse(entry, text, "a path may not hold control characters");
      if ((entry->flags & CUBE_CONFIG_OFF) && strcmp(text, "off") == 0) return CUBE_OK;
      if ((entry->flags & CUBE_CONFIG_ABSOLUTE) && text[0] != '/')
        return refuse(entry, text,
                      (entry->flags & CUBE_CONFIG_OFF)
                          ? "must be an absolute path (starting with '/') or off"
                          : "must be an absolute path (starting with '/')");
      return CUBE_OK;
    case CUBE_CONFIG_WORD:
      if (!all_of(text, "._+-", false))
        return refuse(entry, text, "must be one word of letters, digits and . _ + -");
      return CUBE_OK;
    case CUBE_CONFIG_COMMAND:
      if (!all_of(text, "._+/=:,-", true) || text[0] == ' ')
        return refuse(entry, text,
                      "must be a command of words made of letters, digits and . _ + / = : , - "
                      "(no quoting, no shell characters)");
      return CUBE_OK;
    default:  // CUBE_CONFIG_TEXT: its owner parses it
      if (!is_printable(text)) return refuse(entry, text, "may not hold control characters");
      return CUBE_OK;
  }
}

static cube_status_t check_number(const cube_config_entry_t *entry, const char *text,
                                  uint64_t *out_value) {
  uint64_t value = 0;
  char why[256], low[48], high[48];
  switch (entry->kind) {
    case CUBE_CONFIG_SIZE:
      if (text[0] == '-') return refuse(entry, text, "a size cannot be negative");
      if (!cube_config_parse_size(text, &value)) {
        const char *p = text + (text[0] == '0' && (text[1] == 'x' || text[1] == 'X') ? 2 : 0);
        bool digits_only = *p != '\0';
        for (; *p; ++p) digits_only = digits_only && isxdigit((unsigned char)*p);
        return refuse(entry, text,
                      digits_only ? "too large for 64 bits"
                                  : "not a size (digits or 0x hex, optionally followed by k, m, "
                                    "g or t, e.g. 64m)");
      }
      break;
    case CUBE_CONFIG_COUNT:
      if (text[0] == '-') return refuse(entry, text, "a count cannot be negative");
      if (!parse_count(text, &value)) {
        bool digits_only = true;
        for (const char *p = text; *p; ++p) digits_only = digits_only && isdigit((unsigned char)*p);
        return refuse(entry, text, digits_only ? "too large for 64 bits" : "not a decimal count");
      }
      break;
    case CUBE_CONFIG_SWITCH:
      if (!parse_switch(text, &value))
        return refuse(entry, text, "must be on or off (1/0, true/false, yes/no)");
      *out_value = value;
      return CUBE_OK;
    default:  // CUBE_CONFIG_CHOICE
      if (!parse_choice(text, entry->choices, &value)) {
        snprintf(why, sizeof why, "must be one of %s", entry->choices);
        for (char *c = why; *c; ++c)
          if (*c == '|') *c = ',';
        return refuse(entry, text, why);
      }
      *out_value = value;
      return CUBE_OK;
  }
  if (value < entry->min || value > entry->max) {
    describe_bound(entry, entry->min, low, sizeof low);
    describe_bound(entry, entry->max, high, sizeof high);
    snprintf(why, sizeof why, "out of range: accepted from %s to %s", low, high);
    return refuse(entry, text, why);
  }
  if ((entry->flags & CUBE_CONFIG_POW2) && (value & (value - 1)) != 0)
    return refuse(entry, text, "must be a power of two");
  *out_value = value;
  return CUBE_OK;
}

cube_status_t cube_config_parse_value(cube_config_id_t id, const char *text,
                                      cube_config_value_t *out_value) {
  const cube_config_entry_t *entry = cube_config_entry(id);
  if (!entry || !out_value)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_config_parse_value: bad arguments");
  if (!text || !text[0]) {
    *out_value = (cube_config_value_t){.value = entry->default_value};
    return CUBE_OK;
  }
  bool numeric = entry->kind == CUBE_CONFIG_SIZE || entry->kind == CUBE_CONFIG_COUNT ||
                 entry->kind == CUBE_CONFIG_SWITCH || entry->kind == CUBE_CONFIG_CHOICE;
  uint64_t value = entry->default_value;
  cube_status_t status = numeric ? check_number(entry, text, &value) : check_text(entry, text);
  if (!cube_status_is_ok(status)) {
    if (entry->flags & CUBE_CONFIG_FOREIGN) {
      // Not ours to refuse: read it as unset.
      cube_status_release(status);
      *out_value = (cube_config_value_t){.value = entry->default_value};
      return CUBE_OK;
    }
    return status;
  }
  cube_config_value_t result = {.set = true, .value = value};
  if (!numeric) {
    result.text = strdup(text);
    if (!result.text)
      return cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY, "reading %s: out of host memory",
                              entry->name);
  }
  *out_value = result;
  return CUBE_OK;
}

//===--- The whole table ---===//

cube_status_t cube_config_parse(cube_config_lookup_t lookup, void *context,
                                cube_config_t *out_config) {
  if (!lookup || !out_config)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_config_parse: bad arguments");
  memset(out_config, 0, sizeof *out_config);
  cube_status_t status = CUBE_OK;
  for (int id = 0; id < CUBE_CONFIG_COUNT_OF && cube_status_is_ok(status); ++id) {
    const char *text = lookup(context, kEntries[id].name);
    status = cube_config_parse_value((cube_config_id_t)id, text, &out_config->at[id]);
  }
  if (!cube_status_is_ok(status)) cube_config_release(out_config);
  return status;
}

static const char *lookup_environment(void *context, const char *name) {
  (void)context;
  return getenv(name);
}

cube_status_t cube_config_load(cube_config_t *out_config) {
  return cube_config_parse(lookup_environment, NULL, out_config);
}

cube_status_t cube_config_load_one(cube_config_id_t id, cube_config_value_t *out_value) {
  *out_value = (cube_config_value_t){0};
  if ((unsigned)id >= CUBE_CONFIG_COUNT_OF)
    return cube_status_make(CUBE_STATUS_VALIDATION, "cube_config_load_one: no entry %d", (int)id);
  return cube_config_parse_value(id, lookup_environment(NULL, kEntries[id].name), out_value);
}

void cube_config_release(cube_config_t *config) {
  if (!config) return;
  for (int id = 0; id < CUBE_CONFIG_COUNT_OF; ++id) free(config->at[id].text);
  memset(config, 0, sizeof *config);
}

cube_status_t cube_config_copy(const cube_config_t *config, cube_config_t *out_copy) {
  *out_copy = *config;
  cube_status_t status = CUBE_OK;
  for (int id = 0; id < CUBE_CONFIG_COUNT_OF; ++id) {
    out_copy->at[id].text = NULL;
    if (config->at[id].text && cube_status_is_ok(status)) {
      out_copy->at[id].text = strdup(config->at[id].text);
      if (!out_copy->at[id].text)
        status = cube_status_make(CUBE_STATUS_HOST_OUT_OF_MEMORY,
                                  "copying the configuration: out of memory");
    }
  }
  if (!cube_status_is_ok(status)) cube_config_release(out_copy);
  return status;
}
