//! The cgroup v2 device fence as a program: the eBPF instructions of a `BPF_CGROUP_DEVICE`
//! program that denies a list of character devices and allows everything else (pure).
//!
//! It means exactly what the v1 fence's `devices.deny` lines ([`crate::devices::deny_lines`])
//! mean in a default-allow cgroup: a character device `major:minor` of the list is refused for
//! every access (read, write, mknod); any other device, a block device of the same numbers
//! included, is left to the rules above (the programs attached to the parent cgroups, which the
//! kernel runs too: with `BPF_F_ALLOW_MULTI` a device is opened only when every program on the
//! way to the root says yes, as a v1 child keeps its parent's rules).
//!
//! The kernel calls the program with a `struct bpf_cgroup_dev_ctx` in r1:
//! `u32 access_type` (device type in the low 16 bits, `BPF_DEVCG_ACC_*` in the high 16),
//! `u32 major`, `u32 minor`. The program (n = number of devices):
//!
//! ```text
//! 0      r2 = *(u32 *)(r1 + 0)        ; access_type
//! 1      w2 &= 0xffff                 ; the device type
//! 2      r4 = *(u32 *)(r1 + 4)        ; major
//! 3      r5 = *(u32 *)(r1 + 8)        ; minor
//! 4      if r2 != CHAR goto allow     ; +4n
//!        ; per device:
//!        if r4 != MAJOR goto next     ; +3
//!        if r5 != MINOR goto next     ; +2
//!        r0 = 0                       ; deny
//!        exit
//! allow: r0 = 1
//!        exit
//! ```
//!
//! ```
//! use pjw_cgroup::device_prog::{deny_program, run, DevType, ACC_READ};
//! let prog = deny_program(&[(195, 1)]).unwrap();
//! assert_eq!(run(&prog, DevType::Char, ACC_READ, 195, 1), Ok(false));
//! assert_eq!(run(&prog, DevType::Char, ACC_READ, 195, 0), Ok(true));
//! assert_eq!(prog.to_bytes().len(), 8 * prog.insns().len());
//! ```

use std::fmt;

/// `BPF_DEVCG_DEV_BLOCK`, `BPF_DEVCG_DEV_CHAR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DevType {
    Block,
    Char,
}

impl DevType {
    /// The kernel's number for it (`BPF_DEVCG_DEV_*`).
    pub fn code(self) -> u32 {
        match self {
            DevType::Block => 1,
            DevType::Char => 2,
        }
    }
}

/// `BPF_DEVCG_ACC_MKNOD`, `BPF_DEVCG_ACC_READ`, `BPF_DEVCG_ACC_WRITE`.
pub const ACC_MKNOD: u32 = 1;
pub const ACC_READ: u32 = 2;
pub const ACC_WRITE: u32 = 4;

// Opcodes (include/uapi/linux/bpf_common.h, bpf.h): class | op/size | mode/source.
const LDX_W_MEM: u8 = 0x01 | 0x60; // BPF_LDX | BPF_W (0) | BPF_MEM
const ALU32_AND_K: u8 = 0x04 | 0x50; // BPF_ALU | BPF_AND | BPF_K
const ALU64_MOV_K: u8 = 0x07 | 0xb0; // BPF_ALU64 | BPF_MOV | BPF_K
const JMP_JNE_K: u8 = 0x05 | 0x50; // BPF_JMP | BPF_JNE | BPF_K
const JMP_EXIT: u8 = 0x05 | 0x90; // BPF_JMP | BPF_EXIT

/// Instructions per denied device.
const PER_DEVICE: usize = 4;

/// One eBPF instruction (`struct bpf_insn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            dst,
            src,
            off,
            imm,
        }
    }

    /// The 8 bytes the kernel reads: code, dst in the low and src in the high nibble, off and
    /// imm in the machine's byte order.
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = (self.dst & 0x0f) | (self.src << 4);
        b[2..4].copy_from_slice(&self.off.to_ne_bytes());
        b[4..8].copy_from_slice(&self.imm.to_ne_bytes());
        b
    }
}

/// Why a device list cannot become a program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProgError {
    /// A major or minor the instruction's 32-bit signed immediate cannot hold (Linux's are 12
    /// and 20 bits).
    BadNumber { major: u32, minor: u32 },
    /// More devices than one forward jump can pass over.
    TooMany(usize),
}

impl fmt::Display for ProgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProgError::BadNumber { major, minor } => {
                write!(f, "device {major}:{minor} is not a valid device number")
            }
            ProgError::TooMany(n) => write!(f, "{n} devices are more than one program can deny"),
        }
    }
}

/// A device program, ready to load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceProgram {
    insns: Vec<Insn>,
}

impl DeviceProgram {
    pub fn insns(&self) -> &[Insn] {
        &self.insns
    }

    /// The instructions as the kernel takes them (`BPF_PROG_LOAD`'s `insns`).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.insns.iter().flat_map(|i| i.to_bytes()).collect()
    }
}

/// The program that denies the character devices `devs` (major, minor) and allows the rest.
/// Repeated devices are denied once; the order does not matter.
pub fn deny_program(devs: &[(u32, u32)]) -> Result<DeviceProgram, ProgError> {
    let mut devs = devs.to_vec();
    devs.sort_unstable();
    devs.dedup();
    let mut numbers = Vec::with_capacity(devs.len());
    for &(major, minor) in &devs {
        match (i32::try_from(major), i32::try_from(minor)) {
            (Ok(a), Ok(b)) => numbers.push((a, b)),
            _ => return Err(ProgError::BadNumber { major, minor }),
        }
    }
    let skip_all =
        i16::try_from(numbers.len() * PER_DEVICE).map_err(|_| ProgError::TooMany(numbers.len()))?;
    let char_dev = DevType::Char.code() as i32;
    let mut insns = vec![
        Insn::new(LDX_W_MEM, 2, 1, 0, 0),
        Insn::new(ALU32_AND_K, 2, 0, 0, 0xffff),
        Insn::new(LDX_W_MEM, 4, 1, 4, 0),
        Insn::new(LDX_W_MEM, 5, 1, 8, 0),
        Insn::new(JMP_JNE_K, 2, 0, skip_all, char_dev),
    ];
    for (major, minor) in numbers {
        insns.extend([
            Insn::new(JMP_JNE_K, 4, 0, 3, major),
            Insn::new(JMP_JNE_K, 5, 0, 2, minor),
            Insn::new(ALU64_MOV_K, 0, 0, 0, 0),
            Insn::new(JMP_EXIT, 0, 0, 0, 0),
        ]);
    }
    insns.extend([
        Insn::new(ALU64_MOV_K, 0, 0, 0, 1),
        Insn::new(JMP_EXIT, 0, 0, 0, 0),
    ]);
    Ok(DeviceProgram { insns })
}

/// What the program answers for an access (true: allowed), as the kernel would run it: a small
/// interpreter of exactly the instructions [`deny_program`] emits, for tests and the doc.
/// Anything else (an unknown opcode, a jump out of the program, a read outside the context or
/// of an unset register, a backward jump) is an error, never an answer.
pub fn run(
    prog: &DeviceProgram,
    ty: DevType,
    access: u32,
    major: u32,
    minor: u32,
) -> Result<bool, String> {
    let ctx = [ty.code() | (access << 16), major, minor];
    let mut regs: [Option<u64>; 11] = [None; 11];
    regs[1] = Some(0); // the context pointer: offsets below are into `ctx`
    let mut pc = 0usize;
    let get = |regs: &[Option<u64>; 11], r: u8| -> Result<u64, String> {
        regs.get(usize::from(r))
            .copied()
            .flatten()
            .ok_or_else(|| format!("read of unset register r{r}"))
    };
    loop {
        let i = *prog
            .insns
            .get(pc)
            .ok_or_else(|| format!("pc {pc} outside the program"))?;
        pc += 1;
        match i.code {
            LDX_W_MEM => {
                if get(&regs, i.src)? != 0 || i.src != 1 {
                    return Err(format!("load from r{} is not of the context", i.src));
                }
                let word = usize::try_from(i.off)
                    .ok()
                    .filter(|o| o % 4 == 0)
                    .and_then(|o| ctx.get(o / 4))
                    .ok_or_else(|| format!("load at context offset {}", i.off))?;
                regs[usize::from(i.dst)] = Some(u64::from(*word));
            }
            ALU32_AND_K => {
                let v = get(&regs, i.dst)? as u32 & i.imm as u32;
                regs[usize::from(i.dst)] = Some(u64::from(v));
            }
            ALU64_MOV_K => regs[usize::from(i.dst)] = Some(i.imm as i64 as u64),
            JMP_JNE_K => {
                if i.off < 0 {
                    return Err("backward jump".into());
                }
                if get(&regs, i.dst)? != i.imm as i64 as u64 {
                    pc += i.off as usize;
                }
            }
            JMP_EXIT => return Ok(get(&regs, 0)? != 0),
            c => return Err(format!("opcode {c:#04x} not expected")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::deny_lines;

    /// What a default-allow v1 devices cgroup with these `devices.deny` lines allows: the kernel
    /// refuses an access when an exception has the device's type and exact numbers and shares
    /// an access bit with it (`match_exception_partial`).
    fn v1_allows(lines: &[String], ty: DevType, access: u32, major: u32, minor: u32) -> bool {
        let t = match ty {
            DevType::Char => "c",
            DevType::Block => "b",
        };
        !lines.iter().any(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            let bits = [('r', ACC_READ), ('w', ACC_WRITE), ('m', ACC_MKNOD)]
                .iter()
                .filter(|(c, _)| w[2].contains(*c))
                .fold(0, |a, (_, b)| a | b);
            w[0] == t && w[1] == format!("{major}:{minor}") && access & bits != 0
        })
    }

    #[test]
    fn a_table_of_accesses_and_what_the_program_answers() {
        // Job given GPU 0 of four NVIDIA GPUs: denied 195:1-3 (nvidiactl 195:255 is shared).
        let prog = deny_program(&[(195, 3), (195, 1), (195, 2), (195, 1)]).unwrap();
        let rw = ACC_READ | ACC_WRITE;
        let table: &[(DevType, u32, u32, u32, bool, &str)] = &[
            (DevType::Char, rw, 195, 0, true, "its own GPU"),
            (DevType::Char, ACC_READ, 195, 1, false, "another GPU, read"),
            (
                DevType::Char,
                ACC_WRITE,
                195,
                2,
                false,
                "another GPU, write",
            ),
            (
                DevType::Char,
                ACC_MKNOD,
                195,
                3,
                false,
                "another GPU, mknod",
            ),
            (
                DevType::Char,
                rw | ACC_MKNOD,
                195,
                3,
                false,
                "another GPU, all",
            ),
            (DevType::Char, rw, 195, 255, true, "nvidiactl"),
            (DevType::Char, rw, 195, 4, true, "a GPU pjw does not know"),
            (DevType::Char, rw, 1, 3, true, "/dev/null"),
            (DevType::Char, rw, 5, 0, true, "/dev/tty"),
            (DevType::Char, rw, 1, 195, true, "numbers swapped"),
            (DevType::Char, rw, 226, 1, true, "same minor, other major"),
            (
                DevType::Block,
                rw,
                195,
                1,
                true,
                "a block device of a GPU's numbers",
            ),
        ];
        for &(ty, acc, major, minor, want, what) in table {
            assert_eq!(
                run(&prog, ty, acc, major, minor),
                Ok(want),
                "{what}: {ty:?} {major}:{minor} access {acc}"
            );
        }
        // Duplicates are denied once: 5 + 3 devices × 4 + 2 instructions.
        assert_eq!(prog.insns().len(), 5 + 3 * 4 + 2);
    }

    #[test]
    fn the_program_means_what_the_v1_deny_lines_mean() {
        let devs = [(195, 0), (195, 2), (226, 128), (226, 0), (241, 7)];
        let prog = deny_program(&devs).unwrap();
        let lines = deny_lines(&devs);
        for ty in [DevType::Char, DevType::Block] {
            for access in 1..8 {
                for major in [0, 1, 5, 195, 226, 241, 4095] {
                    for minor in [0, 1, 2, 3, 7, 128, 255, (1 << 20) - 1] {
                        assert_eq!(
                            run(&prog, ty, access, major, minor),
                            Ok(v1_allows(&lines, ty, access, major, minor)),
                            "{ty:?} {major}:{minor} access {access}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn an_empty_list_allows_everything() {
        let prog = deny_program(&[]).unwrap();
        assert_eq!(run(&prog, DevType::Char, ACC_READ, 195, 0), Ok(true));
        assert_eq!(prog.insns().len(), 7);
    }

    #[test]
    fn numbers_an_immediate_cannot_hold_are_refused() {
        assert_eq!(
            deny_program(&[(195, 1), (1 << 31, 0)]),
            Err(ProgError::BadNumber {
                major: 1 << 31,
                minor: 0
            })
        );
        assert!(deny_program(&[(0, u32::MAX)]).is_err());
    }

    #[test]
    fn encoding_follows_struct_bpf_insn() {
        let prog = deny_program(&[(195, 1)]).unwrap();
        let bytes = prog.to_bytes();
        // r2 = *(u32 *)(r1 + 0): code 0x61, dst 2, src 1.
        assert_eq!(&bytes[0..8], &[0x61, 0x12, 0, 0, 0, 0, 0, 0]);
        // r4 = *(u32 *)(r1 + 4)
        assert_eq!(&bytes[16..24], &[0x61, 0x14, 4, 0, 0, 0, 0, 0]);
        // if r2 != 2 goto +4
        assert_eq!(&bytes[32..40], &[0x55, 0x02, 4, 0, 2, 0, 0, 0]);
        // if r4 != 195 goto +3
        assert_eq!(&bytes[40..48], &[0x55, 0x04, 3, 0, 195, 0, 0, 0]);
        // r0 = 1; exit
        let n = bytes.len();
        assert_eq!(
            &bytes[n - 16..],
            &[0xb7, 0, 0, 0, 1, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn the_interpreter_refuses_what_the_generator_never_emits() {
        let mut prog = deny_program(&[(195, 1)]).unwrap();
        prog.insns[0].code = 0x07; // r2 += imm: not ours
        assert!(run(&prog, DevType::Char, ACC_READ, 195, 1).is_err());
        let mut prog = deny_program(&[(195, 1)]).unwrap();
        prog.insns.pop(); // no exit at the end of the allow path
        assert!(run(&prog, DevType::Char, ACC_READ, 1, 3).is_err());
    }
}
