/* opts.c: the command line's conventions, from one option table per command: getopt_long's
 * array, --help, "did you mean", one-line usage errors that start with "attnscope CMD:". */
#define _POSIX_C_SOURCE 200809L
#include <assert.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli.h"

/* Keys of the options every command has; table keys stay below them. */
enum { KEY_HELP = 0x7001, KEY_LIST = 0x7002 };
#define MAX_OPTS 96
#define HELP_COLUMN 30 /* where every command's help text starts */

/* The running command's name for error lines. Process-wide and set once by main before any
 * command runs, like the program name getopt prints: threading it through every cli_error
 * call would only repeat it at each call. */
static const char *command_name = NULL;

void cli_set_command(const char *name) { command_name = name; }

static void vfail(const char *fmt, va_list ap) {
    if (command_name) fprintf(stderr, "attnscope %s: ", command_name);
    else fprintf(stderr, "attnscope: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int cli_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(fmt, ap);
    va_end(ap);
    return code;
}

static int tty_cols(int fd) {
    struct winsize ws;
    return isatty(fd) && ioctl(fd, TIOCGWINSZ, &ws) == 0 ? ws.ws_col : 0;
}

/* The stream's terminal; else COLUMNS; else the terminal on stderr (attnscope ... | less); capped
 * at 100 so that a wide terminal still gets lines one can read. */
int cli_width_of(int fd) {
    const char *cols = getenv("COLUMNS");
    int w = tty_cols(fd);
    if (w <= 0 && cols) w = atoi(cols);
    if (w <= 0) w = tty_cols(STDERR_FILENO);
    if (w <= 0 || w > 100) w = 100;
    return w < 40 ? 40 : w;
}

int cli_width(void) { return cli_width_of(STDOUT_FILENO); }

void cli_wrap(FILE *f, int first, int indent, const char *text) {
    const int width = cli_width();
    int col = first;
    for (const char *p = text; *p;) {
        if (*p == '\n') { /* a hard break */
            fprintf(f, "\n%*s", indent, "");
            col = indent;
            p++;
            continue;
        }
        const char *sp = p;
        while (*sp == ' ') sp++;
        const char *e = sp;
        while (*e && *e != ' ' && *e != '\n') e++;
        int gap = (int)(sp - p), word = (int)(e - sp);
        if (col > indent && col + gap + word > width) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
            gap = 0;
        }
        fprintf(f, "%*s%.*s", gap, "", word, sp);
        col += gap + word;
        p = e;
    }
    fputc('\n', f);
}

void cli_printf_wrap(int indent, const char *fmt, ...) {
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    size_t L = strlen(buf);
    if (L && buf[L - 1] == '\n') buf[L - 1] = 0;
    cli_wrap(stdout, 0, indent, buf);
}

const char *cli_closest(const char *word, const char *const *names, int n) {
    const char *best = NULL;
    int bd = 1 << 30;
    for (int i = 0; i < n; i++) {
        int d = vit_edit_distance(word, names[i]); /* core/config.c */
        if (d < bd) {
            bd = d;
            best = names[i];
        }
    }
    /* a third of the word's letters, at least 2: "modle" -> model, not "q" -> out */
    int L = (int)strlen(word), limit = L / 3 > 2 ? L / 3 : 2;
    if (L <= 2) limit = 1;
    return bd <= limit ? best : NULL;
}

/* The table's length; a table the parser cannot serve is a programmer error. */
static int count_opts(const cli_cmd *cmd) {
    int n = 0;
    for (; cmd->opts[n].name; n++) {
        const cli_opt *o = &cmd->opts[n];
        assert(o->key > 0 && o->key < KEY_HELP && o->key != '?' && o->key != ':' && o->key != 'h');
        assert(o->alias != 'h' && o->help);
        for (int j = 0; o->alias && cmd->opts[j].name; j++) /* -x must not read as another's key */
            assert(j == n || cmd->opts[j].key != o->alias);
        for (int j = 0; j < n; j++) /* one option per name and key (tables built at run time too) */
            assert(strcmp(cmd->opts[j].name, o->name) != 0 && cmd->opts[j].key != o->key);
    }
    assert(n <= MAX_OPTS);
    return n;
}

int cli_opts_add(cli_opt *table, int cap, cli_opt o) {
    int n = 0;
    while (table[n].name) n++;
    assert(n + 1 < cap && o.name);
    table[n] = o;
    table[n + 1] = (cli_opt){0};
    return n + 1;
}

static const cli_opt *find_key(const cli_cmd *cmd, int key) {
    for (const cli_opt *o = cmd->opts; o->name; o++)
        if (o->key == key) return o;
    return NULL;
}

/* "  -o, --out FILE" */
static int opt_label(const cli_opt *o, char *buf, size_t n) {
    int k;
    if (o->alias) k = snprintf(buf, n, "  -%c, --%s", o->alias, o->name);
    else k = snprintf(buf, n, "      --%s", o->name);
    if (o->arg) k += snprintf(buf + k, n - (size_t)k, " %s", o->arg);
    return k;
}

static void print_opt(FILE *f, const char *label, const char *help, const char *values, const char *def) {
    char text[1024];
    int k = snprintf(text, sizeof text, "%s", help);
    if (values && k < (int)sizeof text) k += snprintf(text + k, sizeof text - (size_t)k, ". Values: %s", values);
    if (def && k < (int)sizeof text) {
        if (strcmp(def, "required") == 0) k += snprintf(text + k, sizeof text - (size_t)k, ". Required");
        else k += snprintf(text + k, sizeof text - (size_t)k, ". Default: %s", def);
    }
    if (k < (int)sizeof text - 1 && k > 0 && text[k - 1] != '.') snprintf(text + k, sizeof text - (size_t)k, ".");
    const int L = (int)strlen(label);
    fputs(label, f);
    if (L + 2 > HELP_COLUMN) fprintf(f, "\n%*s", HELP_COLUMN, ""); /* a long label: help below it */
    else fprintf(f, "%*s", HELP_COLUMN - L, "");
    cli_wrap(f, HELP_COLUMN, HELP_COLUMN, text);
}

void cli_opts_help(const cli_cmd *cmd, FILE *f) {
    char head[256];
    int k = snprintf(head, sizeof head, "usage: attnscope %s ", cmd->name);
    fputs(head, f);
    cli_wrap(f, k, k, cmd->usage);
    if (cmd->about) cli_wrap(f, 0, 0, cmd->about);
    fprintf(f, "\noptions:\n");
    char label[160];
    for (const cli_opt *o = cmd->opts; o->name; o++) {
        opt_label(o, label, sizeof label);
        print_opt(f, label, o->help, o->values, o->def);
    }
    char help[64];
    snprintf(help, sizeof help, "this text (also: attnscope help %s)", cmd->name);
    print_opt(f, "  -h, --help", help, NULL, NULL);
    if (cmd->notes) {
        fputc('\n', f);
        cli_wrap(f, 0, 0, cmd->notes);
    }
}

int cli_opts_exit(int ch) { return ch == CLI_HELP ? 0 : 2; }

int cli_missing(const cli_cmd *cmd, const char *what) {
    for (const cli_opt *o = cmd->opts; o->name && what[0] == '-'; o++) /* an option: say what it is */
        if (strncmp(what + 2, o->name, strlen(o->name)) == 0 &&
            (what[2 + strlen(o->name)] == ' ' || !what[2 + strlen(o->name)]))
            return cli_fail(2, "%s is required: %s (attnscope %s --help)", what, o->help, cmd->name);
    return cli_fail(2, "missing %s (usage: attnscope %s %s)", what, cmd->name, cmd->usage);
}

int cli_bad_value(const cli_cmd *cmd, int key, const char *value) {
    const cli_opt *o = find_key(cmd, key);
    if (!o) return cli_fail(2, "bad value \"%s\" (attnscope %s --help)", value, cmd->name);
    return cli_fail(2, "--%s \"%s\": give %s (attnscope %s --help)", o->name, value,
                    o->values ? o->values : o->arg, cmd->name);
}

int cli_extra(const cli_cmd *cmd, const char *word) {
    return cli_fail(2, "unexpected argument \"%s\" (usage: attnscope %s %s)", word, cmd->name, cmd->usage);
}

/* The one-line message for getopt's '?': unknown, ambiguous, or a flag given a value. */
static void unknown_option(const cli_cmd *cmd, const char *word) {
    const int n = count_opts(cmd);
    if (word[0] != '-' || word[1] != '-') { /* a short option */
        cli_fail(2, "unknown option -%c (attnscope %s --help lists the options)", optopt ? optopt : word[1],
                 cmd->name);
        return;
    }
    char name[128];
    snprintf(name, sizeof name, "%s", word + 2);
    char *eq = strchr(name, '=');
    if (eq) *eq = 0;
    const char *names[MAX_OPTS + 1];
    int prefixed = 0;
    char amb[512] = "";
    for (int i = 0; i < n; i++) {
        names[i] = cmd->opts[i].name;
        if (strcmp(name, names[i]) == 0 && !cmd->opts[i].arg) {
            cli_fail(2, "--%s is a flag and takes no value (drop \"=%s\")", name, eq ? eq + 1 : "");
            return;
        }
        if (strncmp(name, names[i], strlen(name)) == 0) {
            size_t L = strlen(amb);
            snprintf(amb + L, sizeof amb - L, "%s--%s", prefixed++ ? ", " : "", names[i]);
        }
    }
    if (prefixed > 1) {
        cli_fail(2, "--%s is ambiguous: did you mean %s?", name, amb);
        return;
    }
    names[n] = "help";
    const char *best = cli_closest(name, names, n + 1);
    if (best) cli_fail(2, "unknown option --%s; did you mean --%s?", name, best);
    else cli_fail(2, "unknown option --%s (attnscope %s --help lists the options)", name, cmd->name);
}

int cli_opts_next(const cli_cmd *cmd, int argc, char **argv) {
    const int n = count_opts(cmd);
    struct option lo[MAX_OPTS + 3];
    char shorts[2 * MAX_OPTS + 8];
    int s = 0;
    shorts[s++] = ':'; /* a missing value returns ':' */
    for (int i = 0; i < n; i++) {
        const cli_opt *o = &cmd->opts[i];
        lo[i] = (struct option){o->name, o->arg ? required_argument : no_argument, NULL, o->key};
        if (o->alias) {
            shorts[s++] = o->alias;
            if (o->arg) shorts[s++] = ':';
        }
    }
    lo[n] = (struct option){"help", no_argument, NULL, KEY_HELP};
    lo[n + 1] = (struct option){"list-options", no_argument, NULL, KEY_LIST};
    lo[n + 2] = (struct option){NULL, 0, NULL, 0};
    shorts[s++] = 'h';
    shorts[s] = 0;
    opterr = 0;
    int li = -1;
    int ch = getopt_long(argc, argv, shorts, lo, &li);
    if (ch == -1) return CLI_END;
    if (li >= 0 && ch != '?' && ch != ':' && optind >= 1) {
        /* getopt_long takes any unambiguous prefix (--export for --export-dir): a near-miss
         * would silently become another option, so only the full name is accepted */
        const char *word = argv[optind - 1];
        const int joined = strncmp(word, "--", 2) == 0 && strchr(word, '=');
        if (lo[li].has_arg == required_argument && !joined && optind >= 2) word = argv[optind - 2];
        if (strncmp(word, "--", 2) == 0) {
            const size_t len = strcspn(word + 2, "=");
            if (len != strlen(lo[li].name) || strncmp(word + 2, lo[li].name, len) != 0) {
                cli_fail(2, "--%.*s is not an option; did you mean --%s? (options are written in "
                         "full)", (int)len, word + 2, lo[li].name);
                return CLI_USAGE;
            }
        }
    }
    if (ch == 'h' || ch == KEY_HELP) {
        cli_opts_help(cmd, stdout);
        return CLI_HELP;
    }
    if (ch == KEY_LIST) { /* for tests and completion: every option the command accepts */
        for (const cli_opt *o = cmd->opts; o->name; o++) printf("--%s%s%s\n", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        printf("--help\n");
        return CLI_HELP;
    }
    if (ch == ':') {
        const cli_opt *o = find_key(cmd, optopt);
        if (!o) /* a short alias: optopt is the letter */
            for (const cli_opt *q = cmd->opts; q->name && !o; q++)
                if (q->alias && q->alias == optopt) o = q;
        if (!o) return cli_fail(2, "an option lacks its value (attnscope %s --help)", cmd->name), CLI_USAGE;
        cli_fail(2, "--%s needs %s (%s%s%s)", o->name, o->arg, o->help, o->values ? "; " : "",
                 o->values ? o->values : "");
        return CLI_USAGE;
    }
    if (ch == '?') {
        const char *word = optind - 1 < argc && optind > 0 ? argv[optind - 1] : "?";
        unknown_option(cmd, word);
        return CLI_USAGE;
    }
    for (const cli_opt *o = cmd->opts; o->name; o++) /* a short alias: its option's key */
        if (o->alias && o->alias == ch) return o->key;
    return ch;
}
