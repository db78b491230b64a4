use raidkit_format::uuid;

const U: [u8; 16] = [
    0x93, 0x25, 0x84, 0xed, 0xe0, 0x84, 0xe3, 0x23, 0x8a, 0x92, 0xae, 0xf7, 0xaf, 0x4f, 0x9b, 0x8f,
];

#[test]
fn format_and_parse() {
    assert_eq!(uuid::format(&U), "932584ed:e084e323:8a92aef7:af4f9b8f");
    assert_eq!(
        uuid::format(&[0; 16]),
        "00000000:00000000:00000000:00000000"
    );
    for s in [
        "932584ed:e084e323:8a92aef7:af4f9b8f",
        "932584ED:E084E323:8A92AEF7:AF4F9B8F",
        "932584ed-e084-e323-8a92-aef7af4f9b8f",
        "932584ede084e3238a92aef7af4f9b8f",
        "932584ed.e084e323.8a92aef7.af4f9b8f",
        "932584ed e084e323 8a92aef7 af4f9b8f",
    ] {
        assert_eq!(uuid::parse(s), Some(U), "{s}");
    }
    for s in [
        "",
        "932584ed:e084e323:8a92aef7:af4f9b8",
        "932584ed:e084e323:8a92aef7:af4f9b8f0",
        "932584ed:e084e323:8a92aef7:af4f9b8g",
        "932584ed/e084e323:8a92aef7:af4f9b8f",
        "932584ed:e084e323:8a92aef7:af4f9b8é",
    ] {
        assert_eq!(uuid::parse(s), None, "{s}");
    }
}
