//! `pjw generate`: man pages and shell completions from the one clap definition ([`crate::cli`]),
//! and pjw.toml(5) from the config reference (docs/config.md), so none of them can drift from
//! what the binary accepts. Hidden: `make install` and `make deb` run it (docs/decisions.md (ag)).

use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::cli::{Cli, GenerateCommand};

/// The config reference, compiled in: pjw.toml(5) is made from it.
const CONFIG_MD: &str = include_str!("../../../docs/config.md");

pub fn run(g: GenerateCommand) -> Result<()> {
    match g {
        GenerateCommand::Man { dir } => write_man_pages(&dir),
        GenerateCommand::Completions { shell, dir } => {
            let text = completions(shell);
            match dir {
                Some(dir) => {
                    std::fs::create_dir_all(&dir)
                        .with_context(|| format!("cannot create {}", dir.display()))?;
                    let path = dir.join(clap_complete::Generator::file_name(&shell, "pjw"));
                    std::fs::write(&path, text)
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    println!("{}", path.display());
                }
                None => print!("{text}"),
            }
            Ok(())
        }
    }
}

/// The completion script for `shell`. Every shell also completes job ids from `pjw status
/// --json` (one cheap request to the local daemon; nothing when none answers) where a job id
/// goes: the JOB of kill, suspend, resume, priority and `job end`, and `report -J/--job`.
pub fn completions(shell: clap_complete::Shell) -> String {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "pjw", &mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    match shell {
        clap_complete::Shell::Bash => text + &BASH_JOB_IDS.replace("JOB_IDS_CMD", JOB_IDS_CMD),
        clap_complete::Shell::Zsh => zsh_with_job_ids(&text),
        clap_complete::Shell::Fish => fish_with_job_ids(&text),
        _ => text,
    }
}

/// The job ids of `pjw status --json` (pretty-printed: one `"id": "…",` line per job), for
/// the shells' scripts.
const JOB_IDS_CMD: &str =
    r#"pjw status --json 2>/dev/null | sed -n 's/^ *"id": *"\([^"]*\)",\{0,1\}$/\1/p'"#;

const BASH_JOB_IDS: &str = r#"
# Job ids where a job id goes, from the daemon (pjw generate adds this).
_pjw_job_ids() {
    JOB_IDS_CMD
}
_pjw_with_jobs() {
    _pjw "$@"
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
    [[ "$cur" == -* ]] && return
    # `--job=ID`: bash splits at the = (COMP_WORDBREAKS).
    [[ "$prev" == = ]] && prev="${COMP_WORDS[COMP_CWORD-2]}"
    local want=
    case "${COMP_WORDS[1]}" in
        kill|suspend|resume|priority) [[ ${COMP_CWORD} -eq 2 ]] && want=1 ;;
        job) [[ ${COMP_CWORD} -eq 3 && "${COMP_WORDS[2]}" == end ]] && want=1 ;;
        report) [[ "$prev" == -J || "$prev" == --job ]] && want=1 ;;
    esac
    if [[ -n "$want" ]]; then
        COMPREPLY=( $(compgen -W "$(_pjw_job_ids)" -- "$cur") )
    fi
}
complete -F _pjw_with_jobs -o bashdefault -o default pjw
"#;

const ZSH_JOB_IDS: &str = r#"
# Job ids where a job id goes, from the daemon (pjw generate adds this).
(( $+functions[_pjw_job_ids] )) ||
_pjw_job_ids() {
    local -a ids
    ids=( ${(f)"$(JOB_IDS_CMD)"} )
    _wanted job-ids expl 'job id' compadd -a ids
}

"#;

/// clap's zsh script with `_pjw_job_ids` as the completer of the JOB arguments and of
/// `report -J/--job`.
fn zsh_with_job_ids(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 512);
    for line in text.lines() {
        let job_arg = line.starts_with("':job -- ")
            || line.starts_with("'-J+[")
            || line.starts_with("'--job=[");
        if job_arg && line.ends_with(":_default' \\") {
            out.push_str(&line.replace(":_default' \\", ":_pjw_job_ids' \\"));
        } else {
            if line.starts_with("if [ \"$funcstack[1]\" = \"_pjw\" ]") {
                out.push_str(&ZSH_JOB_IDS.replace("JOB_IDS_CMD", JOB_IDS_CMD));
            }
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

const FISH_JOB_IDS: &str = r#"
# Job ids where a job id goes, from the daemon (pjw generate adds this).
function __fish_pjw_job_ids
    pjw status --json 2>/dev/null | string replace -rf '^ *"id": *"([^"]*)",?$' '$1'
end

# The JOB of kill, suspend, resume, priority and `job end` comes next.
function __fish_pjw_wants_job_id
    set -l args
    set -l words (commandline -opc)
    set -e words[1]
    for w in $words
        string match -q -- '-*' $w; or set -a args $w
    end
    switch "$args[1]"
        case kill suspend resume priority
            test (count $args) -eq 1
        case job
            test (count $args) -eq 2; and test "$args[2]" = end
        case '*'
            return 1
    end
end

complete -c pjw -n __fish_pjw_wants_job_id -f -a '(__fish_pjw_job_ids)' -d 'job id'
"#;

/// clap's fish script with job ids for the JOB arguments and `report -J/--job`.
fn fish_with_job_ids(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 1024);
    for line in text.lines() {
        out.push_str(line);
        if line
            .starts_with("complete -c pjw -n \"__fish_pjw_using_subcommand report\" -s J -l job ")
            && line.ends_with(" -r")
        {
            out.push_str(" -f -a '(__fish_pjw_job_ids)'");
        }
        out.push('\n');
    }
    out.push_str(FISH_JOB_IDS);
    out
}

/// pjw.1, pjw-SUB.1 for every visible subcommand (and pjw-SUB-SUB.1 below), and pjw.toml.5.
pub fn write_man_pages(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let cmd = Cli::command();
    clap_mangen::generate_to(cmd, dir)
        .with_context(|| format!("cannot write man pages into {}", dir.display()))?;
    let page = dir.join("pjw.toml.5");
    std::fs::write(&page, config_man_page(CONFIG_MD, env!("CARGO_PKG_VERSION")))
        .with_context(|| format!("cannot write {}", page.display()))?;
    Ok(())
}

/// pjw.toml(5) in roff from the Markdown of the config reference: headings become sections,
/// each table row a tagged paragraph (key in bold, then type and default, then the meaning),
/// code blocks stay verbatim. Links keep their text; inline code is bold.
pub fn config_man_page(markdown: &str, version: &str) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        ".TH PJW.TOML 5 \"\" \"pjw {version}\" \"File Formats\"\n\
         .SH NAME\npjw.toml \\- configuration of the pjw node daemon\n\
         .SH SYNOPSIS\n/etc/pjw/pjw.toml\n"
    ));
    let mut in_code = false;
    let mut header: Vec<String> = Vec::new();
    let mut paragraph = false;
    // A table's first row is its header (the names of the facts in each later row).
    let mut in_table = false;
    for line in markdown.lines() {
        let table_row = line.starts_with('|');
        let first_row = table_row && !in_table;
        in_table = table_row;
        if line.starts_with("```") {
            if in_code {
                out.push_str(".fi\n.RE\n");
            } else {
                out.push_str(".PP\n.RS 4\n.nf\n");
            }
            in_code = !in_code;
            paragraph = false;
            continue;
        }
        if in_code {
            out.push_str(&escape_line(line));
            out.push('\n');
            continue;
        }
        if let Some(h) = line.strip_prefix("# ") {
            // The page's own title: its opening paragraph is the description.
            let _ = h;
            out.push_str(".SH DESCRIPTION\n");
            paragraph = false;
        } else if let Some(h) = line.strip_prefix("## ") {
            out.push_str(&format!(".SH {}\n", inline(&h.to_uppercase())));
            paragraph = false;
        } else if let Some(h) = line.strip_prefix("### ") {
            out.push_str(&format!(".SS {}\n", inline(h)));
            paragraph = false;
        } else if line.starts_with('|') {
            if roff_table_row(&mut out, line, first_row, &mut header) {
                paragraph = false;
            }
        } else if line.trim().is_empty() {
            if !paragraph {
                continue;
            }
            paragraph = false;
        } else if let Some(item) = line.strip_prefix("- ") {
            // A list item: a bulleted paragraph; its indented continuation lines follow.
            out.push_str(".IP \\(bu 2\n");
            out.push_str(&inline(item));
            out.push('\n');
            paragraph = true;
        } else {
            if !paragraph {
                out.push_str(".PP\n");
                paragraph = true;
            }
            // Leading spaces would make roff break the line and indent it.
            out.push_str(&inline(line.trim_start()));
            out.push('\n');
        }
    }
    out.push_str(
        ".SH FILES\n/etc/pjw/pjw.toml\n.SH SEE ALSO\n\\fBpjw\\fR(1), \\fBpjw-daemon\\fR(1)\n",
    );
    out
}

/// One Markdown table row of the config reference as a roff tagged paragraph: the key in bold,
/// the facts of the middle cells named by the header's cells, then the meaning. The header row
/// (`first_row`: kept in `header`) and the rule below it write nothing: false.
fn roff_table_row(out: &mut String, line: &str, first_row: bool, header: &mut Vec<String>) -> bool {
    if line.chars().all(|c| matches!(c, '|' | '-' | ':' | ' ')) {
        return false;
    }
    let cells: Vec<String> = line
        .trim()
        .trim_matches('|')
        .split(" | ")
        .map(|c| c.trim().to_string())
        .collect();
    if first_row {
        *header = cells;
        return false;
    }
    out.push_str(".TP\n");
    out.push_str(&inline(&cells[0]));
    out.push('\n');
    let mut facts = Vec::new();
    for (i, cell) in cells
        .iter()
        .enumerate()
        .take(cells.len().saturating_sub(1))
        .skip(1)
    {
        let name = header.get(i).map(|s| s.as_str()).unwrap_or("");
        facts.push(format!("{name}: {}", strip_bold(&inline(cell))));
    }
    if !facts.is_empty() {
        out.push_str(&format!("({})\n.br\n", facts.join("; ")));
    }
    if let Some(last) = cells.last() {
        out.push_str(&inline(last));
        out.push('\n');
    }
    true
}

/// A roff text line: backslashes doubled, a leading `.` or `'` protected.
fn escape_line(s: &str) -> String {
    let s = s.replace('\\', "\\e");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

/// Markdown inline markup to roff: `code` and **bold** bold, [text](link) its text.
fn inline(s: &str) -> String {
    let mut text = String::new();
    let mut rest = s;
    // Links first: keep the text, drop the target.
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|c| open + c) else {
            break;
        };
        let Some(end) = rest[close..].find(')').map(|e| close + e) else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    text.push_str(rest);
    let text = escape_line(&text);
    let mut out = String::new();
    let mut bold = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let toggle = match c {
            '`' => true,
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                true
            }
            _ => false,
        };
        if toggle {
            out.push_str(if bold { "\\fR" } else { "\\fB" });
            bold = !bold;
        } else {
            out.push(c);
        }
    }
    if bold {
        out.push_str("\\fR");
    }
    out
}

fn strip_bold(s: &str) -> String {
    s.replace("\\fB", "").replace("\\fR", "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_row_becomes_a_tagged_paragraph() {
        let md = "# Configuration\n\nIntro `x`.\n\n### `[job]`\n\n| key | type | default | meaning |\n|---|---|---|---|\n| `pids_max` | integer | none | `pids.max` of [every](x.md) job. |\n";
        let roff = config_man_page(md, "1.0");
        assert!(roff.starts_with(".TH PJW.TOML 5"), "{roff}");
        assert!(roff.contains(".SS \\fB[job]\\fR\n"), "{roff}");
        assert!(
            roff.contains(".TP\n\\fBpids_max\\fR\n(type: integer; default: none)\n.br\n\\fBpids.max\\fR of every job.\n"),
            "{roff}"
        );
        assert!(roff.contains(".PP\nIntro \\fBx\\fR.\n"), "{roff}");
    }

    #[test]
    fn list_items_are_bulleted_and_their_continuation_lines_unindented() {
        let roff = config_man_page("Intro.\n\n- **One**: a\n  b `c`\n- Two\n\nAfter.\n", "1");
        assert!(
            roff.contains(".PP\nIntro.\n.IP \\(bu 2\n\\fBOne\\fR: a\nb \\fBc\\fR\n.IP \\(bu 2\nTwo\n.PP\nAfter.\n"),
            "{roff}"
        );
    }

    #[test]
    fn code_blocks_are_verbatim_and_leading_dots_protected() {
        let roff = config_man_page("```\n.hidden = 1\na\\b\n```\n", "1");
        assert!(roff.contains(".nf\n\\&.hidden = 1\na\\eb\n.fi\n"), "{roff}");
    }

    #[test]
    fn the_real_reference_names_every_section() {
        let roff = config_man_page(CONFIG_MD, "0");
        for s in ["[cgroup]", "[job]", "[memory]", "[central]", "[log]"] {
            assert!(roff.contains(&format!(".SS \\fB{s}\\fR")), "{s} missing");
        }
        assert!(roff.contains("\\fBvcpus\\fR"));
    }
}
