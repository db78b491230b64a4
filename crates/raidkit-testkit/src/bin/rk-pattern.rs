//! `rk-pattern [--tagged] SEED LENGTH [OFFSET]` writes a pattern to stdout;
//! `rk-pattern -c [--tagged] SEED LENGTH [OFFSET]` compares stdin with it.
fn main() {
    eprintln!("rk-pattern: work in progress");
    std::process::exit(2);
}
