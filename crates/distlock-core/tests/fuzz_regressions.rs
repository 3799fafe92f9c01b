//! Inputs the fuzz targets in fuzz/ found, kept as plain tests. Each input is
//! exactly what the fuzzer reported; the assertion is the one it broke.

use distlock_core::toolkit::{LockUrl, redact};

/// Every text a parse shows: the error, or the URL's Display and Debug.
fn shown(text: &str) -> String {
    match LockUrl::parse("fuzz", text) {
        Ok(url) => format!("{url}\n{url:?}"),
        Err(error) => format!("{error}\n{error:?}"),
    }
}

/// Asserts that neither `redact` nor a parse error of `text` shows `secret`.
fn hidden(text: &str, secret: &str) {
    let redacted = redact(text);
    assert!(
        !redacted.contains(secret),
        "redact shows {secret:?}: {redacted}"
    );
    let shown = shown(text);
    assert!(!shown.contains(secret), "parse shows {secret:?}: {shown}");
}

/// lock_url: a password with an unescaped `,` made `redact` treat the part
/// before the comma as a separate host and show the rest.
#[test]
fn password_with_a_comma() {
    hidden(
        "redis://:p,ss%13woccad@rhe:4941quest_=xtimeout=0?pass=tls=t://",
        "p,ss%13woccad",
    );
    hidden(
        "redlock:/redloEck://:huntdr2hunter,as@2tl=b,c?nodt_replicas=ut=16/80",
        "huntdr2hunter,as",
    );
    hidden(
        "etwait_replicas=3cretp!ss@s=etcd://l:2379,10.0.0.\0@s=10.0.0.1:ocks?timoeut=1s",
        "2379,10.0.0.\0",
    );
    // backend_kind: `redact_url` on a URL the facade accepts.
    let redacted = redact("redis://:\r\0\0mariadb,@h");
    assert!(!redacted.contains("\r\0\0mariadb,"), "{redacted:?}");
}

/// redis_url, zk_url, mysql_url: a password with an unescaped `#` ended the
/// authority in `redact` (the parser does not end it there), so the error for
/// the bad scheme or the `#` showed the password.
#[test]
fn password_with_a_hash() {
    hidden(
        "re`is://:s3cretp#assword@cache:6379/2?namespace=app:&ttl=10s",
        "s3cretp#assword",
    );
    hidden(
        "zk://app:secretse#ret@imeoutzk1:2181,zk2:2181/prod?namespace=l\u{7f}cks&timeout=5s",
        "secretse#ret",
    );
    hidden(
        "maria`b://u:node_timeout=#:correct%20horse@db:3306/&timeout=5s&greate_table=false",
        "node_timeout=#:correct%20horse",
    );
}

/// lock_url, backend_kind: what looked like credentials per host
/// (`:a@h1,:b@h2`) was masked host by host, showing a password that itself
/// holds `@`, `,` and `:`. Everything up to the last `@` is masked now.
#[test]
fn password_that_looks_like_several_hosts() {
    hidden("://i:@i,h]ii:@i:]", "@i,h]ii:");
    let input = "redis://:@0,passecre=tlsecre=xlatushe&_token=e___ssl-mode=tp=x&lsesretd=4crcretpassword&tlsecre=x&lseauth_to>en=etp=secrcert=&ddce6a:@0?pass=%2F?\0retd=dis://:passx&ddce6a:@0?pass=tls?\0retd=x&db=2&\0@0?passeeb=2x&dbd2&\0u=1x&\u{19}1&tedb=2";
    hidden(input, "@0,passecre=tlsecre=xlatushe");
    assert_eq!(redact("redlock://:a@h1,:b@h2"), "redlock://:***@h2");
    assert_eq!(redact("redis://h#frag"), "redis://h#frag");
}

/// lock_url: `%+F` decoded as byte 0x0F, since `u8::from_str_radix` takes a
/// leading `+`; an escape is two hex digits, nothing else.
#[test]
fn a_signed_escape_is_a_bad_escape() {
    let input = "fedis://:%2Fs%03woccad@rhbk:wwwwwwwwwwwwwwww...s://:passx&ddc%+Fpass";
    let shown = shown(input);
    assert!(shown.contains("the path has a bad %-escape"), "{shown}");
    for bad in ["x://h/%+1", "x://h?a=%-1", "x://u:%+f@h"] {
        assert!(LockUrl::parse("x", bad).is_err(), "{bad}");
    }
}

/// Found while writing the fuzz oracle rather than by a run: `redact` judged
/// a parameter secret by its raw name, so `%70assword=` (`password`, as the
/// parser decodes it) was shown in parse errors.
#[test]
fn an_escaped_secret_parameter_name() {
    hidden("redis://h:x?%70assword=hunter22", "hunter22");
}
