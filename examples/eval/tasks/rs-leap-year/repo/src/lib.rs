/// Whether `year` is a leap year in the Gregorian calendar.
pub fn is_leap(year: u32) -> bool {
    year % 4 == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_years() {
        assert!(is_leap(2024));
        assert!(!is_leap(2023));
    }

    #[test]
    fn century_years() {
        assert!(!is_leap(1900));
        assert!(is_leap(2000));
    }
}
